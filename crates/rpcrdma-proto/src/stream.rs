//! Abstract description of an RPC message's XDR stream for planning.
//!
//! The transport maps its own message representation onto a slice of
//! [`Item`]s: runs of ordinary XDR bytes, and DDP-eligible opaque items whose
//! 4-byte length word sits at the end of the preceding [`Item::Xdr`] run and
//! whose XDR roundup pad is implied (RFC 8166 §3.4.4). Plans refer back to
//! the items by index through [`Span`]s, so the transport can send or
//! register the bytes where they already are.

/// One element of an unreduced XDR stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Item {
    /// `n` bytes of XDR carried as they are.
    Xdr(u32),
    /// The content (`n` bytes, without pad) of a DDP-eligible opaque item.
    /// In the unreduced stream it occupies `n` rounded up to 4 bytes.
    Ddp(u32),
}

impl Item {
    /// Bytes the item occupies in the unreduced stream (pad included).
    pub fn unreduced_len(&self) -> u64 {
        match *self {
            Item::Xdr(n) => n as u64,
            Item::Ddp(n) => roundup4(n as u64),
        }
    }
}

/// A piece of bytes the transport must supply: part of an item, or zeros
/// (XDR roundup pad of a DDP item that was not reduced).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Span {
    /// `len` bytes of item `item` starting at `offset` within it.
    Item {
        /// Index into the items slice.
        item: usize,
        /// Offset within the item.
        offset: u32,
        /// Number of bytes.
        len: u32,
    },
    /// `len` zero bytes.
    Zeros(u32),
}

impl Span {
    /// Number of bytes.
    pub fn len(&self) -> u32 {
        match *self {
            Span::Item { len, .. } | Span::Zeros(len) => len,
        }
    }

    /// True for a zero-length span.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The sub-span `[from, from + len)` of this span.
    pub fn slice(&self, from: u32, len: u32) -> Span {
        match *self {
            Span::Item { item, offset, .. } => Span::Item {
                item,
                offset: offset + from,
                len,
            },
            Span::Zeros(_) => Span::Zeros(len),
        }
    }
}

/// Total length of a list of spans.
pub fn spans_len(spans: &[Span]) -> u64 {
    spans.iter().map(|s| s.len() as u64).sum()
}

/// Copies spans into contiguous bytes, given each item's bytes.
pub fn gather(spans: &[Span], items: &[&[u8]]) -> Vec<u8> {
    let mut out = Vec::with_capacity(spans_len(spans) as usize);
    gather_with(spans, |i| items[i], |b| out.extend_from_slice(b));
    out
}

/// Hands the bytes of `spans` to `put` in order: item bytes from `item(i)`
/// (the bytes of item `i` of the plan), pads as zeros. A transport gathers
/// the inline part of a Send, or the content of a Position-Zero Read chunk,
/// into a buffer of its own this way. Spans come from a plan made over the
/// same items, so they lie within them.
pub fn gather_with<'a>(
    spans: &[Span],
    item: impl Fn(usize) -> &'a [u8],
    mut put: impl FnMut(&[u8]),
) {
    const ZEROS: [u8; 64] = [0; 64];
    for s in spans {
        match *s {
            Span::Item {
                item: i,
                offset,
                len,
            } => {
                put(&item(i)[offset as usize..(offset + len) as usize]);
            }
            Span::Zeros(mut n) => {
                while n > 0 {
                    let k = n.min(ZEROS.len() as u32);
                    put(&ZEROS[..k as usize]);
                    n -= k;
                }
            }
        }
    }
}

/// `n` rounded up to a multiple of 4 (XDR roundup, RFC 4506 §3).
pub fn roundup4(n: u64) -> u64 {
    (n + 3) & !3
}

/// XDR pad length for `n` content bytes.
pub fn pad4(n: u64) -> u64 {
    roundup4(n) - n
}

/// Appends `spans` to `out`, merging with the last span where contiguous.
pub(crate) fn push_span(out: &mut Vec<Span>, s: Span) {
    if s.is_empty() {
        return;
    }
    if let Some(last) = out.last_mut() {
        match (last, s) {
            (
                Span::Item { item, offset, len },
                Span::Item {
                    item: i2,
                    offset: o2,
                    len: l2,
                },
            ) if *item == i2 && *offset + *len == o2 => {
                *len += l2;
                return;
            }
            (Span::Zeros(n), Span::Zeros(m)) => {
                *n += m;
                return;
            }
            _ => {}
        }
    }
    out.push(s);
}

/// Splits a sequence of spans at byte boundaries given by `lens`, yielding
/// for each target piece the list of spans covering it.
pub(crate) fn split_spans(spans: &[Span], lens: &[u32]) -> Vec<Vec<Span>> {
    let mut out = Vec::with_capacity(lens.len());
    let mut idx = 0usize;
    let mut used = 0u32; // bytes of spans[idx] already consumed
    for &want in lens {
        let mut piece = Vec::new();
        let mut need = want;
        while need > 0 && idx < spans.len() {
            let s = spans[idx];
            let avail = s.len() - used;
            let take = avail.min(need);
            push_span(&mut piece, s.slice(used, take));
            need -= take;
            used += take;
            if used == s.len() {
                idx += 1;
                used = 0;
            }
        }
        out.push(piece);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc4506_s3_roundup() {
        assert_eq!(
            (0..9).map(roundup4).collect::<Vec<_>>(),
            vec![0, 4, 4, 4, 4, 8, 8, 8, 8]
        );
        assert_eq!((0..5).map(pad4).collect::<Vec<_>>(), vec![0, 3, 2, 1, 0]);
        assert_eq!(Item::Ddp(5).unreduced_len(), 8);
        assert_eq!(Item::Xdr(5).unreduced_len(), 5);
    }

    #[test]
    fn push_span_merges_contiguous() {
        let mut v = Vec::new();
        push_span(
            &mut v,
            Span::Item {
                item: 0,
                offset: 0,
                len: 4,
            },
        );
        push_span(
            &mut v,
            Span::Item {
                item: 0,
                offset: 4,
                len: 4,
            },
        );
        push_span(&mut v, Span::Zeros(0));
        push_span(&mut v, Span::Zeros(2));
        push_span(&mut v, Span::Zeros(1));
        push_span(
            &mut v,
            Span::Item {
                item: 1,
                offset: 0,
                len: 4,
            },
        );
        push_span(
            &mut v,
            Span::Item {
                item: 0,
                offset: 8,
                len: 4,
            },
        );
        assert_eq!(
            v,
            vec![
                Span::Item {
                    item: 0,
                    offset: 0,
                    len: 8
                },
                Span::Zeros(3),
                Span::Item {
                    item: 1,
                    offset: 0,
                    len: 4
                },
                Span::Item {
                    item: 0,
                    offset: 8,
                    len: 4
                },
            ]
        );
        assert_eq!(spans_len(&v), 19);
    }

    #[test]
    fn split_spans_at_segment_boundaries() {
        let spans = [
            Span::Item {
                item: 0,
                offset: 0,
                len: 10,
            },
            Span::Zeros(2),
            Span::Item {
                item: 1,
                offset: 4,
                len: 8,
            },
        ];
        let parts = split_spans(&spans, &[4, 9, 7, 0]);
        assert_eq!(
            parts,
            vec![
                vec![Span::Item {
                    item: 0,
                    offset: 0,
                    len: 4
                }],
                vec![
                    Span::Item {
                        item: 0,
                        offset: 4,
                        len: 6
                    },
                    Span::Zeros(2),
                    Span::Item {
                        item: 1,
                        offset: 4,
                        len: 1
                    }
                ],
                vec![Span::Item {
                    item: 1,
                    offset: 5,
                    len: 7
                }],
                vec![],
            ]
        );
        let items: [&[u8]; 2] = [b"0123456789", b"abcdefghijkl"];
        assert_eq!(gather(&spans, &items), b"0123456789\0\0efghijkl");
    }

    #[test]
    fn gather_with_long_pads_and_any_sink() {
        let spans = [
            Span::Item {
                item: 1,
                offset: 1,
                len: 2,
            },
            Span::Zeros(150),
            Span::Item {
                item: 0,
                offset: 0,
                len: 1,
            },
        ];
        let items: [&[u8]; 2] = [b"x", b"abc"];
        let mut out = Vec::new();
        let mut calls = 0;
        gather_with(
            &spans,
            |i| items[i],
            |b| {
                calls += 1;
                out.extend_from_slice(b)
            },
        );
        assert_eq!(out.len(), 153);
        assert_eq!(&out[..2], b"bc");
        assert!(out[2..152].iter().all(|&b| b == 0));
        assert_eq!(out[152], b'x');
        assert_eq!(calls, 1 + 3 + 1, "zeros in 64-byte pieces");
        assert_eq!(out, gather(&spans, &items));
    }
}
