//! CRC32c (Castagnoli) as MPA uses it.
