//! Finding the bytes a JSON string treats specially, eight at a time.
//!
//! Writing a string means copying it up to the next byte to escape (`"`,
//! `\`, a control character); reading one, finding its closing quote and
//! whether it has escapes or bytes beyond ASCII. serde_json looks at each
//! byte through a table: in a plugin, that loop over a
//! record's strings was 13 % of the README-style plugin's CPU (lab note
//! `docs/perf/2026-12-07-serde-plugin-path.md`). Here each step reads a
//! `u64` and flags its interesting bytes with word arithmetic (SWAR), the
//! same code natively (where the tests run) and in a WebAssembly guest.
//!
//! Each flagging function sets the high bit of every byte that matches,
//! and may set it in bytes *above* a match (a borrow runs upwards), never
//! below: the lowest flag is always exact, and only the lowest is used.

const ONES: u64 = 0x0101_0101_0101_0101;
const HIGH_BITS: u64 = 0x8080_8080_8080_8080;

/// Flags the bytes of `word` equal to `byte` (exact up to the lowest).
#[inline]
fn equal_to(word: u64, byte: u8) -> u64 {
    let differ = word ^ (ONES * u64::from(byte));
    differ.wrapping_sub(ONES) & !differ & HIGH_BITS
}

/// Flags the bytes of `word` below `bound` (at most 0x80; exact up to the
/// lowest).
#[inline]
fn below(word: u64, bound: u8) -> u64 {
    word.wrapping_sub(ONES * u64::from(bound)) & !word & HIGH_BITS
}

/// Flags the bytes of `word` (eight bytes read little-endian) that
/// serde_json escapes when it writes a string: `"`, `\\` and the control
/// characters below 0x20 (exact up to the lowest).
#[inline]
fn to_escape(word: u64) -> u64 {
    equal_to(word, b'"') | equal_to(word, b'\\') | below(word, 0x20)
}

/// Whether serde_json escapes `byte` in a string: what [`to_escape`]
/// flags, one byte at a time.
#[inline]
pub(crate) fn is_to_escape(byte: u8) -> bool {
    byte == b'"' || byte == b'\\' || byte < 0x20
}

/// Whether any byte of `bytes` (shorter than 16) is one serde_json
/// escapes, found with a fixed number of loads whatever the length (two
/// overlapping words, or three bytes): in a WebAssembly guest every turn
/// of a loop also checks the epoch deadline, which a byte-by-byte loop
/// over a short string (most keys) pays per byte.
#[inline]
pub(crate) fn short_has_escape(bytes: &[u8]) -> bool {
    let word = |at: usize| {
        let mut word = [0u8; 8];
        word.copy_from_slice(&bytes[at..at + 8]);
        u64::from_le_bytes(word)
    };
    let half = |at: usize| {
        let mut half = [0u8; 4];
        half.copy_from_slice(&bytes[at..at + 4]);
        u64::from(u32::from_le_bytes(half))
    };
    match bytes.len() {
        0 => false,
        length @ 1..=3 => {
            is_to_escape(bytes[0])
                || is_to_escape(bytes[length / 2])
                || is_to_escape(bytes[length - 1])
        }
        length @ 4..=7 => to_escape(half(0) | half(length - 4) << 32) != 0,
        length @ 8..=15 => (to_escape(word(0)) | to_escape(word(length - 8))) != 0,
        _ => first_to_escape(bytes, 0) != bytes.len(),
    }
}

/// The index of the first byte at or after `from` that serde_json
/// escapes in a string (`"`, `\\`, below 0x20), or `bytes.len()`.
#[inline]
pub(crate) fn first_to_escape(bytes: &[u8], from: usize) -> usize {
    first_flagged(bytes, from, false)
}

/// The index of the first byte at or after `from` that ends a fast read
/// of a string's text: one [`first_to_escape`] finds, or a byte of a
/// multi-byte UTF-8 sequence (0x80 and above); `bytes.len()` if there is
/// none.
#[inline]
pub(crate) fn first_special(bytes: &[u8], from: usize) -> usize {
    first_flagged(bytes, from, true)
}

/// The first byte at or after `from` to escape, or (`beyond_ascii`) to
/// escape or at 0x80 and above. In a WebAssembly guest built with SIMD
/// (`sluice plugin build` turns on `simd128`), sixteen bytes a step; then
/// eight (SWAR); then one.
#[inline]
fn first_flagged(bytes: &[u8], from: usize, beyond_ascii: bool) -> usize {
    let mut at = from;
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    while let Some(chunk) = bytes.get(at..at + 16) {
        let flagged = simd::flags(chunk, beyond_ascii);
        if flagged != 0 {
            return at + flagged.trailing_zeros() as usize;
        }
        at += 16;
    }
    let high_bits = if beyond_ascii { HIGH_BITS } else { 0 };
    while let Some(chunk) = bytes.get(at..at + 8) {
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        let word = u64::from_le_bytes(word);
        let flagged = to_escape(word) | (word & high_bits);
        if flagged != 0 {
            return at + (flagged.trailing_zeros() / 8) as usize;
        }
        at += 8;
    }
    while let Some(&byte) = bytes.get(at) {
        if is_to_escape(byte) || (beyond_ascii && byte >= 0x80) {
            return at;
        }
        at += 1;
    }
    bytes.len()
}

/// Sixteen bytes at a time with WebAssembly's SIMD instructions (run as
/// the host CPU's by wasmtime). Built only for a guest; its callers' tests
/// run there (`conformance::filter_rewrite_gives_the_same_records_whichever_way_it_reads_them`
/// puts escapes and multi-byte characters at every offset of a string).
#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
mod simd {
    use core::arch::wasm32::*;

    /// One bit per byte of `chunk` (16 bytes long; shorter: none flagged)
    /// that is `"`, `\\`, below 0x20 or (`beyond_ascii`) 0x80 and above.
    #[inline]
    pub(super) fn flags(chunk: &[u8], beyond_ascii: bool) -> u32 {
        let Ok(chunk) = <&[u8; 16]>::try_from(chunk) else {
            return 0;
        };
        // SAFETY: `chunk` is 16 readable bytes, and WebAssembly loads need
        // no alignment.
        let bytes = unsafe { v128_load(chunk.as_ptr().cast()) };
        let mut flagged = v128_or(
            v128_or(
                u8x16_eq(bytes, u8x16_splat(b'"')),
                u8x16_eq(bytes, u8x16_splat(b'\\')),
            ),
            u8x16_lt(bytes, u8x16_splat(0x20)),
        );
        if beyond_ascii {
            // 0x80 and above are the negative bytes.
            flagged = v128_or(flagged, i8x16_lt(bytes, i8x16_splat(0)));
        }
        u32::from(u8x16_bitmask(flagged))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Several flagged bytes in one word (borrows running upwards)
        /// leave the lowest flag where a byte-by-byte search stops.
        #[test]
        fn the_lowest_flag_is_the_first_byte_to_escape(
            word in prop::array::uniform8(prop::sample::select(vec![
                b'a', b' ', b'!', b'#', b'"', b'\\', 0x00, 0x01, 0x1f, 0x20, 0x21, 0x7f, 0x80, 0xff,
            ])),
        ) {
            let flagged = to_escape(u64::from_le_bytes(word));
            let lowest = (flagged != 0).then(|| flagged.trailing_zeros() as usize / 8);
            prop_assert_eq!(lowest, word.iter().position(|&b| is_to_escape(b)));
        }

        #[test]
        fn finds_the_first_flagged_byte_as_a_byte_by_byte_search_does(
            bytes in prop::collection::vec(prop::sample::select(vec![
                b'a', b' ', b'"', b'\\', 0x00, 0x1f, 0x20, 0x7f, 0x80, 0xc3, 0xff,
            ]), 0..40),
            from in 0usize..41,
        ) {
            let from = from.min(bytes.len());
            let expected = (from..bytes.len())
                .find(|&i| is_to_escape(bytes[i]) || bytes[i] >= 0x80)
                .unwrap_or(bytes.len());
            prop_assert_eq!(first_special(&bytes, from), expected);
            let expected = (from..bytes.len())
                .find(|&i| is_to_escape(bytes[i]))
                .unwrap_or(bytes.len());
            prop_assert_eq!(first_to_escape(&bytes, from), expected);
            prop_assert_eq!(short_has_escape(&bytes[from..]), expected != bytes.len());
        }
    }

    #[test]
    fn every_byte_value_at_every_position_of_a_word() {
        for byte in 0..=255u8 {
            for position in 0..16 {
                let mut bytes = [b'a'; 16];
                bytes[position] = byte;
                let expected = |is: bool| if is { position } else { 16 };
                let mut word = [0u8; 8];
                word.copy_from_slice(&bytes[position / 8 * 8..][..8]);
                let flagged = to_escape(u64::from_le_bytes(word));
                let lowest = (flagged != 0)
                    .then(|| position / 8 * 8 + flagged.trailing_zeros() as usize / 8);
                assert_eq!(lowest.unwrap_or(16), expected(is_to_escape(byte)));
            }
        }
    }
}
