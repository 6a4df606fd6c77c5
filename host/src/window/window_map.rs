//! A key's windows in memory (the window states' cache entry).

use super::Window;
use super::states::WindowState;

/// A key's windows in memory, in window order: a sorted list, as a key
/// has few windows at a time (one tumbling window, `size / slide` sliding
/// ones, a few sessions). A `BTreeMap` allocated a whole node (~600 bytes)
/// for the single window most keys have.
#[derive(Debug, Default)]
pub(super) struct WindowMap(Vec<(Window, WindowState)>);

impl WindowMap {
    pub(super) fn find(&self, window: &Window) -> Result<usize, usize> {
        self.0.binary_search_by(|(w, _)| w.cmp(window))
    }

    pub(super) fn contains_key(&self, window: &Window) -> bool {
        self.find(window).is_ok()
    }

    pub(super) fn get_mut(&mut self, window: &Window) -> Option<&mut WindowState> {
        let at = self.find(window).ok()?;
        Some(&mut self.0[at].1)
    }

    pub(super) fn insert(&mut self, window: Window, state: WindowState) {
        match self.find(&window) {
            Ok(at) => self.0[at].1 = state,
            Err(at) => self.0.insert(at, (window, state)),
        }
    }

    pub(super) fn remove(&mut self, window: &Window) -> Option<WindowState> {
        let at = self.find(window).ok()?;
        Some(self.0.remove(at).1)
    }

    pub(super) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub(super) fn len(&self) -> usize {
        self.0.len()
    }

    pub(super) fn keys(&self) -> impl Iterator<Item = &Window> {
        self.0.iter().map(|(window, _)| window)
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = (&Window, &WindowState)> {
        self.0.iter().map(|(window, state)| (window, state))
    }

    pub(super) fn iter_mut(&mut self) -> impl Iterator<Item = (&Window, &mut WindowState)> {
        self.0.iter_mut().map(|(window, state)| (&*window, state))
    }
}
