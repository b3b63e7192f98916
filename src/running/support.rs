//! Karpenter's support policy by date: each minor is supported until the next one; LTS lines for
//! twelve months from release (security fixes only in the last six). The table and its source:
//! docs/karpenter-support.md.

use crate::karpenter_iam::KarpenterVersion;
use std::fmt;

/// A calendar date (proleptic Gregorian, UTC).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Ymd {
    pub y: i32,
    pub m: u32,
    pub d: u32,
}

impl Ymd {
    pub const fn new(y: i32, m: u32, d: u32) -> Ymd {
        Ymd { y, m, d }
    }

    /// Days since 1970-01-01 (Howard Hinnant's `days_from_civil`).
    pub fn days_since_epoch(&self) -> i64 {
        let y = i64::from(self.y) - i64::from(self.m <= 2);
        let era = y.div_euclid(400);
        let yoe = y - era * 400;
        let m = i64::from(self.m);
        let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(self.d) - 1;
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
        era * 146_097 + doe - 719_468
    }

    /// The date of a time in seconds since the epoch.
    pub fn from_epoch(secs: i64) -> Ymd {
        let z = secs.div_euclid(86_400) + 719_468;
        let era = z.div_euclid(146_097);
        let doe = z - era * 146_097;
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        let mp = (5 * doy + 2) / 153;
        let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
        let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
        Ymd { y: (yoe + era * 400 + i64::from(m <= 2)) as i32, m, d }
    }

    /// Today (UTC).
    pub fn today() -> Ymd {
        let secs = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64);
        Ymd::from_epoch(secs)
    }

    /// `YYYY-MM-DD` (None: not a date).
    pub fn parse(text: &str) -> Option<Ymd> {
        let mut it = text.trim().splitn(3, '-');
        let (y, m, d) = (it.next()?.parse().ok()?, it.next()?.parse().ok()?, it.next()?.parse().ok()?);
        ((1..=12).contains(&m) && (1..=31).contains(&d)).then(|| Ymd::new(y, m, d))
    }

    /// The same day `months` later (the month's last day when it has fewer days).
    pub fn plus_months(&self, months: u32) -> Ymd {
        let total = self.m - 1 + months;
        let (y, m) = (self.y + (total / 12) as i32, total % 12 + 1);
        let last = Ymd::new(if m == 12 { y + 1 } else { y }, if m == 12 { 1 } else { m + 1 }, 1).days_since_epoch()
            - Ymd::new(y, m, 1).days_since_epoch();
        Ymd::new(y, m, self.d.min(last as u32))
    }
}

impl fmt::Display for Ymd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:04}-{:02}-{:02}", self.y, self.m, self.d)
    }
}

/// One Karpenter minor release: when its `.0` was tagged, and whether it is an LTS line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Release {
    pub minor: u32,
    pub released: Ymd,
    pub lts: bool,
}

/// Every v1 minor, oldest first: the date of its `v1.N.0` tag in aws/karpenter-provider-aws, and
/// the LTS lines of SUPPORT.md's "LTS versions table" (v1.9, released Feb 2026, end of life Feb
/// 2027; v1.14, released Jul 2026, end of life Jul 2027). SUPPORT.md's "Example Timeline" also
/// shows v1.0, v1.2 and v1.6 as LTS, but as an illustration written after those lines' year had
/// (nearly) passed; the table is what the project committed to.
pub const RELEASES: [Release; 15] = [
    Release { minor: 0, released: Ymd::new(2024, 8, 14), lts: false },
    Release { minor: 1, released: Ymd::new(2024, 11, 30), lts: false },
    Release { minor: 2, released: Ymd::new(2025, 1, 28), lts: false },
    Release { minor: 3, released: Ymd::new(2025, 3, 4), lts: false },
    Release { minor: 4, released: Ymd::new(2025, 4, 16), lts: false },
    Release { minor: 5, released: Ymd::new(2025, 5, 23), lts: false },
    Release { minor: 6, released: Ymd::new(2025, 7, 14), lts: false },
    Release { minor: 7, released: Ymd::new(2025, 9, 15), lts: false },
    Release { minor: 8, released: Ymd::new(2025, 10, 8), lts: false },
    Release { minor: 9, released: Ymd::new(2026, 2, 6), lts: true },
    Release { minor: 10, released: Ymd::new(2026, 3, 20), lts: false },
    Release { minor: 11, released: Ymd::new(2026, 4, 6), lts: false },
    Release { minor: 12, released: Ymd::new(2026, 4, 24), lts: false },
    Release { minor: 13, released: Ymd::new(2026, 6, 10), lts: false },
    Release { minor: 14, released: Ymd::new(2026, 7, 10), lts: true },
];

/// How long an LTS line is supported, and for how long of that with more than security fixes.
pub const LTS_MONTHS: u32 = 12;
pub const LTS_ACTIVE_MONTHS: u32 = 6;

/// The support status of a minor on a date.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Support {
    /// An LTS line within its twelve months; `security_only` in its last six.
    Lts { until: Ymd, security_only: bool },
    /// The newest minor on that date (supported until the next minor's release).
    Supported,
    /// Out of support since `since` (the next minor's release, or an LTS line's end).
    Ended { since: Ymd },
    /// Not released yet on that date, or newer than this table.
    Unknown,
}

impl fmt::Display for Support {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Support::Lts { until, security_only: false } => write!(f, "LTS, supported until {until}"),
            Support::Lts { until, security_only: true } => write!(f, "LTS, security fixes only, until {until}"),
            Support::Supported => f.write_str("supported (the newest minor; until the next one is released)"),
            Support::Ended { since } => write!(f, "out of support since {since}"),
            Support::Unknown => f.write_str("support status unknown to karpctl"),
        }
    }
}

impl Support {
    /// A stable word for documents: `lts`, `lts-security-only`, `supported`, `out-of-support`,
    /// `unknown`.
    pub fn word(&self) -> &'static str {
        match self {
            Support::Lts { security_only: false, .. } => "lts",
            Support::Lts { security_only: true, .. } => "lts-security-only",
            Support::Supported => "supported",
            Support::Ended { .. } => "out-of-support",
            Support::Unknown => "unknown",
        }
    }
}

/// The support status of `version` on `date`.
pub fn support_on(version: KarpenterVersion, date: Ymd) -> Support {
    let Some(r) = RELEASES.iter().find(|r| r.minor == version.minor) else { return Support::Unknown };
    if date < r.released {
        return Support::Unknown;
    }
    let next = RELEASES.iter().find(|n| n.minor == version.minor + 1).map(|n| n.released);
    if r.lts {
        let until = r.released.plus_months(LTS_MONTHS);
        if date < until {
            // Active until the next LTS line is released (or six months, whichever comes first).
            let next_lts = RELEASES.iter().find(|n| n.lts && n.minor > r.minor).map(|n| n.released);
            let active_until =
                next_lts.map_or(r.released.plus_months(LTS_ACTIVE_MONTHS), |n| n.min(r.released.plus_months(LTS_ACTIVE_MONTHS)));
            return Support::Lts { until, security_only: date >= active_until };
        }
        return Support::Ended { since: until };
    }
    match next {
        Some(n) if date >= n => Support::Ended { since: n },
        _ => Support::Supported,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(minor: u32) -> KarpenterVersion {
        KarpenterVersion { minor }
    }

    #[test]
    fn the_table_covers_every_version_karpctl_knows_in_order() {
        let minors: Vec<u32> = RELEASES.iter().map(|r| r.minor).collect();
        let known: Vec<u32> = KarpenterVersion::all().map(|k| k.minor).collect();
        assert_eq!(minors, known, "a new KarpenterVersion needs its row here");
        assert!(RELEASES.windows(2).all(|w| w[0].released < w[1].released));
        assert_eq!(RELEASES.iter().filter(|r| r.lts).map(|r| r.minor).collect::<Vec<_>>(), [9, 14]);
    }

    #[test]
    fn dates_convert_both_ways() {
        assert_eq!(Ymd::new(1970, 1, 1).days_since_epoch(), 0);
        assert_eq!(Ymd::new(2026, 8, 1).days_since_epoch() * 86_400, 1_785_542_400);
        for secs in [0, 1_785_578_400, 951_782_400 /* 2000-02-29 */, 4_107_542_400] {
            let d = Ymd::from_epoch(secs);
            assert_eq!(d.days_since_epoch() * 86_400, secs - secs.rem_euclid(86_400), "{d}");
        }
        assert_eq!(Ymd::from_epoch(951_782_400), Ymd::new(2000, 2, 29));
        assert_eq!(Ymd::new(2026, 2, 6).plus_months(12), Ymd::new(2027, 2, 6));
        assert_eq!(Ymd::new(2026, 8, 31).plus_months(6), Ymd::new(2027, 2, 28));
        assert_eq!(Ymd::new(2026, 7, 10).to_string(), "2026-07-10");
    }

    #[test]
    fn a_regular_minor_is_supported_until_the_next_minor() {
        assert_eq!(support_on(v(13), Ymd::new(2026, 6, 30)), Support::Supported);
        assert_eq!(support_on(v(13), Ymd::new(2026, 7, 10)), Support::Ended { since: Ymd::new(2026, 7, 10) });
        assert_eq!(support_on(v(10), Ymd::new(2026, 8, 1)), Support::Ended { since: Ymd::new(2026, 4, 6) });
        assert_eq!(support_on(v(0), Ymd::new(2026, 8, 1)), Support::Ended { since: Ymd::new(2024, 11, 30) });
        assert_eq!(support_on(v(12), Ymd::new(2026, 1, 1)), Support::Unknown, "not released yet");
    }

    #[test]
    fn lts_lines_are_supported_twelve_months_the_last_six_for_security_only() {
        // v1.9: active until v1.14 (the next LTS) came out, security fixes until Feb 2027.
        assert_eq!(support_on(v(9), Ymd::new(2026, 3, 1)), Support::Lts { until: Ymd::new(2027, 2, 6), security_only: false });
        assert_eq!(support_on(v(9), Ymd::new(2026, 8, 1)), Support::Lts { until: Ymd::new(2027, 2, 6), security_only: true });
        assert_eq!(support_on(v(9), Ymd::new(2027, 2, 6)), Support::Ended { since: Ymd::new(2027, 2, 6) });
        // v1.14: LTS from its release, active for six months, then security only, to Jul 2027.
        assert_eq!(support_on(v(14), Ymd::new(2026, 8, 21)), Support::Lts { until: Ymd::new(2027, 7, 10), security_only: false });
        assert_eq!(support_on(v(14), Ymd::new(2027, 3, 1)), Support::Lts { until: Ymd::new(2027, 7, 10), security_only: true });
        assert_eq!(support_on(v(14), Ymd::new(2027, 8, 1)), Support::Ended { since: Ymd::new(2027, 7, 10) });
        assert_eq!(support_on(v(14), Ymd::new(2026, 8, 21)).to_string(), "LTS, supported until 2027-07-10");
    }
}
