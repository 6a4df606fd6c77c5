//! A plugin of the `aggregate` worlds as a window's [`Aggregator`]: the
//! runtime's [`PluginAggregator`] does the calls; this is where the window
//! operator meets it.

use std::sync::Arc;

use serde_json::Value;

use super::aggregate::{AggregateError, Aggregator, GroupAdd};
use crate::record::Record;
use crate::runtime::{PluginAggregator, SwappablePlugin};

impl Aggregator for PluginAggregator {
    fn plugin(&mut self) -> Option<&mut dyn SwappablePlugin> {
        Some(self)
    }

    fn create(&mut self) -> Result<Vec<u8>, AggregateError> {
        PluginAggregator::create(self)
    }

    fn add(
        &mut self,
        accumulator: &mut Vec<u8>,
        records: &[&Record],
    ) -> Result<Vec<(usize, String)>, AggregateError> {
        PluginAggregator::add(self, accumulator, records)
    }

    fn add_groups(&mut self, groups: &mut [GroupAdd<'_>]) -> Result<(), AggregateError> {
        PluginAggregator::add_groups(self, groups)
    }

    fn projects_fields(&mut self) -> Option<Arc<[String]>> {
        self.projected_fields()
    }

    fn merge(&mut self, a: &[u8], b: &[u8]) -> Result<Vec<u8>, AggregateError> {
        PluginAggregator::merge(self, a, b)
    }

    fn finish(&mut self, accumulator: &[u8]) -> Result<Value, AggregateError> {
        PluginAggregator::finish(self, accumulator)
    }
}
