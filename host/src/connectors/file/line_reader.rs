//! The lines of a file, read a chunk at a time into reused buffers and
//! split with `memchr`; each line is a slice of its chunk (nothing copied
//! or allocated per line). A line that spans two chunks is copied to the
//! front of the next chunk.

use bytes::Bytes;
use sluice_json::scan as json_scan;
use std::io::Read;
use std::sync::Arc;

/// How much of the file is read at a time (more when one line is longer).
pub(super) const CHUNK_BYTES: usize = 1 << 20;

/// At most this many chunk buffers wait in a source's [`ChunkPool`] (the
/// records in flight between the source and its operators span a few
/// chunks; more would only hold memory).
const POOLED_CHUNKS: usize = 8;

/// The lines of a file, read a chunk at a time; each line is a slice of
/// its chunk (a [`Bytes`] sharing it), so that making a record copies and
/// allocates nothing.
///
/// A chunk's buffer goes back to the source's [`ChunkPool`] when the last
/// line of it is dropped, and the next chunk is read into it. Reusing
/// buffers is what makes this cheap: reading every chunk into fresh memory
/// cost more in the kernel's copy into untouched pages than copying each
/// line out of one reused buffer did (ADR 0015, second step), and that in
/// turn cost an allocation, a copy and a free on another thread per record
/// (eleventh step). A line that spans two chunks is copied to the front of
/// the next one.
///
/// Each chunk's buffer ends with [`json_scan::PADDING`] zero bytes past its
/// data, so that every line is followed by that many bytes of its buffer
/// and the JSON scan reads it where it lies (simdjson reads past a
/// document's end; ADR 0015, nineteenth step).
///
/// A record that lives long keeps its whole chunk: the pool then makes a
/// new buffer. Operators and sinks copy what they keep (state, output
/// buffers), so records live about as long as the batches in flight.
pub(super) struct LineReader {
    file: Box<dyn Read + Send>,
    /// The chunk read last; `chunk[start..]` is not yet returned as lines.
    chunk: Bytes,
    start: usize,
    /// The file has been read to its end.
    eof: bool,
    /// Bytes read at a time: [`CHUNK_BYTES`] (smaller in tests).
    chunk_bytes: usize,
    pool: ChunkPool,
}

/// Buffers of chunks none of whose lines is alive any more, for the next
/// chunks to be read into (shared with the chunks, which return their
/// buffer when dropped, on whatever thread drops their last line).
#[derive(Debug, Clone, Default)]
struct ChunkPool(Arc<std::sync::Mutex<Vec<Vec<u8>>>>);

impl ChunkPool {
    /// A buffer to read a chunk into: an empty one from the pool, or new.
    fn take(&self, capacity: usize) -> Vec<u8> {
        let reused = self.0.lock().ok().and_then(|mut free| free.pop());
        let mut buffer = reused.unwrap_or_default();
        buffer.clear();
        buffer.reserve_exact(capacity);
        buffer
    }

    fn give_back(&self, buffer: Vec<u8>) {
        if let Ok(mut free) = self.0.lock()
            && free.len() < POOLED_CHUNKS
        {
            free.push(buffer);
        }
    }
}

/// The buffer behind a chunk's lines: back to its pool when the last line
/// is dropped.
struct PooledChunk {
    buffer: Vec<u8>,
    pool: ChunkPool,
}

impl AsRef<[u8]> for PooledChunk {
    fn as_ref(&self) -> &[u8] {
        &self.buffer
    }
}

impl Drop for PooledChunk {
    fn drop(&mut self) {
        self.pool.give_back(std::mem::take(&mut self.buffer));
    }
}

impl LineReader {
    pub(super) fn new(file: Box<dyn Read + Send>, chunk_bytes: usize) -> Self {
        LineReader {
            file,
            chunk: Bytes::new(),
            start: 0,
            eof: false,
            chunk_bytes,
            pool: ChunkPool::default(),
        }
    }

    /// The next line without its `\n` (`None` at the end of the file). The
    /// last line needs no `\n`.
    pub(super) fn next_line(&mut self) -> std::io::Result<Option<Bytes>> {
        loop {
            let pending = &self.chunk[self.start..];
            if let Some(end) = memchr::memchr(b'\n', pending) {
                let line = self.chunk.slice(self.start..self.start + end);
                self.start += end + 1;
                return Ok(Some(line));
            }
            if self.eof {
                if pending.is_empty() {
                    return Ok(None);
                }
                let line = self.chunk.slice(self.start..);
                self.start = self.chunk.len();
                return Ok(Some(line));
            }
            self.fill()?;
        }
    }

    /// Reads the next chunk into a buffer from the pool, behind a copy of
    /// the unfinished line.
    ///
    /// `read_to_end` reads straight into the buffer's spare capacity (a
    /// file reads into uninitialised memory), so nothing is zero-filled
    /// first; it retries interrupted reads.
    fn fill(&mut self) -> std::io::Result<()> {
        let pending = &self.chunk[self.start..];
        let capacity = self.chunk_bytes.max(pending.len() * 2).max(1);
        let mut buffer = self.pool.take(capacity + json_scan::PADDING);
        buffer.extend_from_slice(pending);
        let wanted = capacity - buffer.len();
        let read = (&mut self.file)
            .take(wanted as u64)
            .read_to_end(&mut buffer)?;
        if read < wanted {
            self.eof = true;
        }
        let data = buffer.len();
        buffer.resize(data + json_scan::PADDING, 0);
        self.chunk = Bytes::from_owner(PooledChunk {
            buffer,
            pool: self.pool.clone(),
        })
        .slice(..data);
        self.start = 0;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines_of(text: &[u8], chunk_bytes: usize) -> Vec<Vec<u8>> {
        let mut reader =
            LineReader::new(Box::new(std::io::Cursor::new(text.to_vec())), chunk_bytes);
        let mut lines = Vec::new();
        while let Some(line) = reader.next_line().unwrap() {
            lines.push(line.to_vec());
        }
        lines
    }

    #[test]
    fn lines_are_split_alike_whatever_the_chunk_size() {
        let text = b"{\"a\":1}\n\n{\"b\":22}\r\nlonger line than a chunk\nlast without newline";
        let expected: Vec<Vec<u8>> = text.split(|b| *b == b'\n').map(<[u8]>::to_vec).collect();
        for chunk_bytes in [1, 2, 3, 7, 16, 1 << 20] {
            assert_eq!(
                lines_of(text, chunk_bytes),
                expected,
                "chunk of {chunk_bytes}"
            );
        }
        assert_eq!(lines_of(b"a\n", 4), vec![b"a".to_vec()]);
        assert!(lines_of(b"", 4).is_empty());
    }

    /// The buffers a reader reads chunks of `text` into (by address), when
    /// its lines are dropped at once or all kept; and the kept lines.
    fn chunk_buffers(text: &[u8], keep: bool) -> (usize, Vec<Bytes>) {
        let mut reader = LineReader::new(Box::new(std::io::Cursor::new(text.to_vec())), 64);
        let mut buffers = std::collections::BTreeSet::new();
        let mut kept = Vec::new();
        while let Some(line) = reader.next_line().unwrap() {
            buffers.insert(reader.chunk.as_ptr() as usize);
            if keep {
                kept.push(line);
            }
        }
        (buffers.len(), kept)
    }

    #[test]
    fn chunk_buffers_are_reused_once_their_lines_are_dropped() {
        let text: Vec<u8> = (0..2000)
            .flat_map(|i| format!("{{\"line\":{i}}}\n").into_bytes())
            .collect();
        // Lines dropped as read: two buffers take turns (the next chunk is
        // read while the reader still holds the last).
        let (buffers, _) = chunk_buffers(&text, false);
        assert!(buffers <= 2, "{buffers} buffers");
        // Lines kept: every chunk has its own buffer, and what is kept is
        // never overwritten by a later chunk.
        let (buffers, kept) = chunk_buffers(&text, true);
        assert!(buffers > 100, "{buffers} buffers");
        let expected: Vec<Vec<u8>> = text
            .split(|b| *b == b'\n')
            .filter(|line| !line.is_empty())
            .map(<[u8]>::to_vec)
            .collect();
        let kept: Vec<Vec<u8>> = kept.iter().map(|line| line.to_vec()).collect();
        assert_eq!(kept, expected);
    }
}
