//! Wall-clock timestamps a run records (start and end of a run or block).

/// Now, RFC 3339 UTC.
pub fn now_rfc3339() -> String {
    time::OffsetDateTime::now_utc()
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_else(|_| "unknown".into())
}

#[cfg(test)]
mod tests {
    #[test]
    fn is_rfc3339_utc() {
        // 2026-12-06T08:23:09.123456789Z: a date, `T`, a time, `Z`.
        let t = super::now_rfc3339();
        let b = t.as_bytes();
        assert!(t.len() >= 20 && t.ends_with('Z'), "{t}");
        assert_eq!(
            (b[4], b[7], b[10], b[13], b[16]),
            (b'-', b'-', b'T', b':', b':'),
            "{t}"
        );
        assert!(t[..4].parse::<u32>().is_ok_and(|y| y >= 2024), "{t}");
    }
}
