//! An answer as it is written: a list of byte pieces, the first holding the length prefix, so
//! that batches served as stored go out from where they lie (a mapped segment) without being
//! copied into one buffer first. The connection writes the pieces with vectored writes.

use std::collections::VecDeque;
use std::io::IoSlice;

use bytes::{Buf, Bytes};

/// An answer's pieces, in order, none empty.
#[derive(Debug, Default)]
pub(super) struct Frame {
    pieces: VecDeque<Bytes>,
    remaining: usize,
}

impl Frame {
    /// Appends `piece` (nothing if it is empty).
    pub(super) fn push(&mut self, piece: Bytes) {
        if !piece.is_empty() {
            self.remaining += piece.len();
            self.pieces.push_back(piece);
        }
    }

    /// Puts `piece` first (nothing if it is empty).
    pub(super) fn push_front(&mut self, piece: Bytes) {
        if !piece.is_empty() {
            self.remaining += piece.len();
            self.pieces.push_front(piece);
        }
    }

    /// The answer's pieces joined (for tests).
    #[cfg(test)]
    pub(super) fn joined(&self) -> Vec<u8> {
        self.pieces.iter().flat_map(|p| p.iter().copied()).collect()
    }
}

impl From<Bytes> for Frame {
    fn from(bytes: Bytes) -> Frame {
        let mut frame = Frame::default();
        frame.push(bytes);
        frame
    }
}

impl Buf for Frame {
    fn remaining(&self) -> usize {
        self.remaining
    }

    fn chunk(&self) -> &[u8] {
        self.pieces.front().map_or(&[], |p| &p[..])
    }

    fn advance(&mut self, mut n: usize) {
        self.remaining = self.remaining.saturating_sub(n);
        // Bounded by the pieces.
        while n > 0 {
            let Some(front) = self.pieces.front_mut() else {
                return;
            };
            if n < front.len() {
                front.advance(n);
                return;
            }
            n -= front.len();
            self.pieces.pop_front();
        }
    }

    fn chunks_vectored<'a>(&'a self, dst: &mut [IoSlice<'a>]) -> usize {
        let mut n = 0;
        for (slot, piece) in dst.iter_mut().zip(&self.pieces) {
            *slot = IoSlice::new(piece);
            n += 1;
        }
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frame_reads_as_its_pieces_joined_however_it_is_advanced() {
        let mut frame = Frame::from(Bytes::from_static(b"ab"));
        frame.push(Bytes::new());
        frame.push(Bytes::from_static(b"cde"));
        frame.push_front(Bytes::from_static(b"0"));
        assert_eq!(frame.joined(), b"0abcde");
        assert_eq!(frame.remaining(), 6);
        let mut slices = [IoSlice::new(&[]); 8];
        assert_eq!(frame.chunks_vectored(&mut slices), 3);
        frame.advance(2);
        assert_eq!((frame.chunk(), frame.remaining()), (&b"b"[..], 4));
        frame.advance(2);
        assert_eq!((frame.chunk(), frame.remaining()), (&b"de"[..], 2));
        let mut rest = Vec::new();
        while frame.has_remaining() {
            rest.extend_from_slice(frame.chunk());
            let n = frame.chunk().len();
            frame.advance(n);
        }
        assert_eq!(rest, b"de");
    }
}
