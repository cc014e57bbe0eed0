//! Byte sizes on the command line: `4096`, `4k`, `1M`, `16MiB`, `2g`.

/// Parses a size: a decimal number optionally followed by a binary unit
/// (`k`/`K`/`KiB`/`kb`, `M`/`MiB`, `G`/`GiB`; case-insensitive, all powers
/// of 1024) or `b`/`B` for bytes.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    if digits.is_empty() {
        return Err(format!(
            "invalid size {text:?}: expected a number such as 4096, 4k or 16MiB"
        ));
    }
    let number: u64 = digits
        .parse()
        .map_err(|_| format!("invalid size {text:?}: number too large"))?;
    if unit.starts_with(['.', ',']) {
        return Err(format!(
            "invalid size {text:?}: whole numbers only (e.g. 1536k rather than 1.5M)"
        ));
    }
    let shift = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        other => {
            return Err(format!(
                "invalid size {text:?}: unknown unit {other:?} (use k, M, G, KiB, MiB or GiB)"
            ))
        }
    };
    number
        .checked_mul(1u64 << shift)
        .ok_or_else(|| format!("invalid size {text:?}: too large"))
}

/// [`parse_size`] for a 32-bit XDR length.
pub fn parse_size_u32(s: &str) -> Result<u32, String> {
    let n = parse_size(s)?;
    u32::try_from(n).map_err(|_| format!("size {s:?} is over the XDR limit of 4 GiB - 1"))
}

/// [`parse_size`] for a buffer or limit size: at least one byte.
pub fn parse_size_nonzero(s: &str) -> Result<usize, String> {
    match usize::try_from(parse_size(s)?) {
        Ok(0) => Err(format!("invalid size {s:?}: expected 1 byte or more")),
        Ok(n) => Ok(n),
        Err(_) => Err(format!("size {s:?} is too large")),
    }
}

/// Formats a byte count for people: `512 B`, `4 KiB`, `16 MiB`; a count
/// that is not a whole number of its unit also gets its exact bytes, so it
/// never looks exact when it is not: `1.50 MiB (1572864 B)`,
/// `16.00 MiB (16777217 B)`.
pub fn format_size(bytes: u64) -> String {
    const UNITS: [(&str, u64); 3] = [("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)];
    for (name, scale) in UNITS {
        if bytes >= scale {
            return if bytes.is_multiple_of(scale) {
                format!("{} {name}", bytes / scale)
            } else {
                format!("{:.2} {name} ({bytes} B)", bytes as f64 / scale as f64)
            };
        }
    }
    format!("{bytes} B")
}

/// `n` with the word "byte", singular or plural: "1 byte", "2 bytes".
pub fn bytes_word(n: impl Into<u64>) -> String {
    let n = n.into();
    if n == 1 {
        "1 byte".into()
    } else {
        format!("{n} bytes")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_word_agrees_in_number() {
        assert_eq!(bytes_word(1u32), "1 byte");
        assert_eq!(bytes_word(0u32), "0 bytes");
        assert_eq!(bytes_word(1001u64), "1001 bytes");
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("0"), Ok(0));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("4k"), Ok(4096));
        assert_eq!(parse_size("4K"), Ok(4096));
        assert_eq!(parse_size("1M"), Ok(1 << 20));
        assert_eq!(parse_size("16MiB"), Ok(16 << 20));
        assert_eq!(parse_size("16mib"), Ok(16 << 20));
        assert_eq!(parse_size("2G"), Ok(2 << 30));
        assert_eq!(parse_size("7b"), Ok(7));
        assert!(parse_size("").is_err());
        assert!(parse_size("k").is_err());
        assert!(parse_size("4x").is_err());
        assert!(parse_size("1.5M")
            .unwrap_err()
            .contains("whole numbers only"));
        assert!(parse_size("-1").is_err());
        assert!(parse_size("99999999999999999999").is_err());
        assert!(parse_size("99999999999G").is_err());
        assert_eq!(parse_size_u32("4GiB").map_err(|_| ()), Err(()));
        assert_eq!(parse_size_u32("16M"), Ok(16 << 20));
        assert!(parse_size_nonzero("0").is_err());
        assert_eq!(parse_size_nonzero("4k"), Ok(4096));
    }

    #[test]
    fn formatting() {
        assert_eq!(format_size(0), "0 B");
        assert_eq!(format_size(4096), "4 KiB");
        assert_eq!(format_size(16 << 20), "16 MiB");
        assert_eq!(format_size(1536 * 1024), "1.50 MiB (1572864 B)");
        assert_eq!(format_size(16777217), "16.00 MiB (16777217 B)");
        assert_eq!(format_size(1000), "1000 B");
    }
}
