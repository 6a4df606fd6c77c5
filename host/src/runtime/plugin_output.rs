//! A plugin's standard output and error, forwarded to the host log.
//!
//! Languages whose runtime prints (a Rust panic message, Python's
//! tracebacks, `console.log`) write to WASI stdout/stderr. The host logs
//! each complete line, tagged with tenant, pipeline and operator, and keeps
//! the last few stderr lines of the current call so that a trap's
//! dead-letter reason can say what the plugin printed (e.g. its panic).

use crate::state::OperatorScope;
use crate::sync::lock;
use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamResult};

/// Longest line logged; the rest of a longer line is dropped.
const MAX_LINE: usize = 4096;
/// Lines of stderr kept for fault reasons.
const RECENT_LINES: usize = 4;

/// Which stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stream {
    Stdout,
    Stderr,
}

#[derive(Default)]
struct Lines {
    partial: Vec<u8>,
    recent: VecDeque<String>,
}

/// One of a plugin instance's output streams. Cheap to clone: clones share
/// the line buffer.
#[derive(Clone)]
pub(crate) struct PluginOutput {
    scope: Arc<OperatorScope>,
    stream: Stream,
    lines: Arc<Mutex<Lines>>,
}

impl PluginOutput {
    pub(crate) fn new(scope: Arc<OperatorScope>, stream: Stream) -> Self {
        PluginOutput {
            scope,
            stream,
            lines: Arc::default(),
        }
    }

    fn lines(&self) -> std::sync::MutexGuard<'_, Lines> {
        lock(&self.lines)
    }

    fn write_bytes(&self, bytes: &[u8]) {
        let mut lines = self.lines();
        for &byte in bytes {
            if byte == b'\n' {
                let line = String::from_utf8_lossy(&lines.partial).into_owned();
                lines.partial.clear();
                if line.trim().is_empty() {
                    continue;
                }
                self.log(&line);
                if lines.recent.len() == RECENT_LINES {
                    lines.recent.pop_front();
                }
                lines.recent.push_back(line);
            } else if lines.partial.len() < MAX_LINE {
                lines.partial.push(byte);
            }
        }
    }

    fn log(&self, line: &str) {
        let OperatorScope {
            tenant,
            pipeline,
            operator,
        } = &*self.scope;
        match self.stream {
            Stream::Stdout => {
                tracing::info!(%tenant, %pipeline, %operator, stream = "stdout", "{line}")
            }
            Stream::Stderr => {
                tracing::warn!(%tenant, %pipeline, %operator, stream = "stderr", "{line}")
            }
        }
    }

    /// Forgets the lines kept so far (called before each plugin call).
    pub(crate) fn clear_recent(&self) {
        self.lines().recent.clear();
    }

    /// The last lines written since [`PluginOutput::clear_recent`], joined,
    /// including an unterminated last line.
    pub(crate) fn recent(&self) -> String {
        let lines = self.lines();
        let mut parts: Vec<String> = lines.recent.iter().cloned().collect();
        if !lines.partial.is_empty() {
            parts.push(String::from_utf8_lossy(&lines.partial).into_owned());
        }
        parts.join(" | ")
    }
}

impl IsTerminal for PluginOutput {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for PluginOutput {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }

    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

impl OutputStream for PluginOutput {
    fn write(&mut self, bytes: bytes::Bytes) -> StreamResult<()> {
        self.write_bytes(&bytes);
        Ok(())
    }

    fn flush(&mut self) -> StreamResult<()> {
        Ok(())
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        Ok(64 * 1024)
    }
}

#[async_trait::async_trait]
impl Pollable for PluginOutput {
    async fn ready(&mut self) {}
}

impl tokio::io::AsyncWrite for PluginOutput {
    fn poll_write(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.write_bytes(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}
