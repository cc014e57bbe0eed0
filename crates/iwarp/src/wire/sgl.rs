//! Scatter/gather functions: view a byte range of a list of buffers as a
//! sequence of borrowed slices, without copying.

use core::ops::Range;

/// Total length of a scatter/gather list.
pub fn sgl_len<B: AsRef<[u8]>>(sgl: &[B]) -> usize {
    sgl.iter().map(|b| b.as_ref().len()).sum()
}

/// Iterator over the non-empty pieces of `sgl` that cover `range` (byte
/// offsets into the concatenation of the list). A range past the end of the
/// list is clipped.
pub fn sgl_range<B: AsRef<[u8]>>(sgl: &[B], range: Range<usize>) -> SglRange<'_, B> {
    SglRange {
        sgl,
        idx: 0,
        base: 0,
        start: range.start,
        end: range.end.max(range.start),
    }
}

/// Sequential cutter of a scatter/gather list: each
/// [`SglCursor::take`] returns the next `len` bytes as an [`SglRange`],
/// starting where the previous one ended, in O(pieces touched) — use it
/// when segmenting a long message (plain [`sgl_range`] rescans the list
/// from the start every time).
#[derive(Debug, Clone)]
pub struct SglCursor<'a, B> {
    sgl: &'a [B],
    idx: usize,
    base: usize,
    pos: usize,
}

impl<'a, B: AsRef<[u8]>> SglCursor<'a, B> {
    /// A cursor at offset 0 of `sgl`.
    pub fn new(sgl: &'a [B]) -> Self {
        SglCursor {
            sgl,
            idx: 0,
            base: 0,
            pos: 0,
        }
    }

    /// Current offset.
    pub fn position(&self) -> usize {
        self.pos
    }

    /// The next `len` bytes (clipped at the end of the list).
    pub fn take(&mut self, len: usize) -> SglRange<'a, B> {
        let r = SglRange {
            sgl: self.sgl,
            idx: self.idx,
            base: self.base,
            start: self.pos,
            end: self.pos.saturating_add(len),
        };
        self.pos = self.pos.saturating_add(len);
        while let Some(b) = self.sgl.get(self.idx) {
            let l = b.as_ref().len();
            if self.base + l > self.pos {
                break;
            }
            self.base += l;
            self.idx += 1;
        }
        r
    }
}

/// See [`sgl_range`].
#[derive(Debug, Clone)]
pub struct SglRange<'a, B> {
    sgl: &'a [B],
    idx: usize,
    base: usize,
    start: usize,
    end: usize,
}

impl<'a, B: AsRef<[u8]>> Iterator for SglRange<'a, B> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        while self.start < self.end {
            let buf = self.sgl.get(self.idx)?.as_ref();
            let buf_end = self.base + buf.len();
            if self.start >= buf_end {
                self.idx += 1;
                self.base = buf_end;
                continue;
            }
            let lo = self.start - self.base;
            let hi = self.end.min(buf_end) - self.base;
            self.start = self.base + hi;
            return Some(&buf[lo..hi]);
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges() {
        let a: [&[u8]; 4] = [b"abc", b"", b"defg", b"hi"];
        assert_eq!(sgl_len(&a), 9);
        let cat = |r: Range<usize>| -> Vec<u8> {
            sgl_range(&a, r).flat_map(|s| s.iter().copied()).collect()
        };
        let all = b"abcdefghi";
        for s in 0..=9 {
            for e in s..=9 {
                assert_eq!(cat(s..e), all[s..e].to_vec());
                assert!(sgl_range(&a, s..e).all(|p| !p.is_empty()));
            }
        }
        assert_eq!(cat(7..100), b"hi".to_vec());
        assert_eq!(sgl_range(&a, 2..6).count(), 2);
    }

    #[test]
    fn cursor_matches_ranges() {
        let a: [&[u8]; 5] = [b"abc", b"", b"defg", b"h", b"ijklm"];
        for step in 1..=14 {
            let mut c = SglCursor::new(&a);
            let mut at = 0;
            while at < 14 {
                let got: Vec<u8> = c.take(step).flatten().copied().collect();
                let want: Vec<u8> = sgl_range(&a, at..at + step).flatten().copied().collect();
                assert_eq!(got, want, "step {step} at {at}");
                at += step;
                assert_eq!(c.position(), at);
            }
        }
    }
}
