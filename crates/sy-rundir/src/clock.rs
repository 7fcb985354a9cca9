//! The time stamp of a run artifact (`created_at`, `started_at`, `ended_at`): now, RFC 3339 UTC.

/// Now, RFC 3339 UTC (`1970-01-01T00:00:00Z` in the impossible case the clock cannot be
/// formatted).
pub fn now_rfc3339() -> String {
    time::OffsetDateTime::now_utc()
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_else(|_| "1970-01-01T00:00:00Z".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn now_is_rfc3339_utc() {
        let now = now_rfc3339();
        let b = now.as_bytes();
        assert!(now.len() >= 20, "{now}");
        assert_eq!(
            (b[4], b[7], b[10], b[13], b[16]),
            (b'-', b'-', b'T', b':', b':'),
            "{now}"
        );
        assert!(now.ends_with('Z'), "{now}");
        assert!(now[..4].parse::<u32>().unwrap() >= 2024, "{now}");
    }
}
