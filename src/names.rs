//! Deterministic names that fit AWS limits.

use sha2::{Digest, Sha256};

/// Fit `name` into `limit` characters: unchanged when it fits, otherwise cut and followed by
/// `-` and 8 hex characters of a hash of the full name, so that the result is stable and two
/// long names that share a prefix stay distinct. Returns the name and whether it was shortened.
pub fn fit(name: &str, limit: usize) -> (String, bool) {
    if name.len() <= limit {
        return (name.to_string(), false);
    }
    let hash = Sha256::digest(name.as_bytes());
    let hex: String = hash.iter().take(4).map(|b| format!("{b:02x}")).collect();
    let keep = limit - hex.len() - 1;
    let mut cut: String = name.chars().take(keep).collect();
    while cut.ends_with('-') || cut.ends_with('_') {
        cut.pop();
    }
    (format!("{cut}-{hex}"), true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_names_are_untouched() {
        assert_eq!(fit("KarpenterNodeRole-a", 64), ("KarpenterNodeRole-a".to_string(), false));
    }

    #[test]
    fn long_names_are_cut_with_a_stable_hash() {
        let long = format!("KarpenterNodeRole-{}", "x".repeat(100));
        let (a, s) = fit(&long, 64);
        assert!(s);
        assert!(a.len() <= 64);
        assert_eq!(fit(&long, 64).0, a, "deterministic");
        let other = format!("KarpenterNodeRole-{}y", "x".repeat(99));
        assert_ne!(fit(&other, 64).0, a, "distinct names stay distinct");
    }
}
