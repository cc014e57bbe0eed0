//! Wire formats (MPA, DDP, RDMAP): zero-copy views and `Repr`s.
