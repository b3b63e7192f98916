//! "Did you mean": the known word closest to a mistyped one (a plan key, a cluster name).

/// Edit distance (insertions, deletions, substitutions; a swap of two neighbours counts one).
fn distance(a: &str, b: &str) -> usize {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in d[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            d[i][j] = (d[i - 1][j] + 1).min(d[i][j - 1] + 1).min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                d[i][j] = d[i][j].min(d[i - 2][j - 2] + 1);
            }
        }
    }
    d[a.len()][b.len()]
}

/// The known word closest to `typed`, if it is close enough to be what was meant: at most a
/// third of its letters off (at least one), or the same but for case, `-` and `_`.
pub fn closest<'a>(typed: &str, known: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let norm = |s: &str| s.to_ascii_lowercase().replace('-', "_");
    let t = norm(typed);
    let limit = (typed.chars().count() / 3).max(1);
    known
        .into_iter()
        .filter(|k| *k != typed)
        .map(|k| (distance(&t, &norm(k)), k))
        .filter(|(d, _)| *d <= limit)
        .min_by_key(|(d, k)| (*d, *k))
        .map(|(_, k)| k)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_closest_known_word_when_close_enough() {
        assert_eq!(closest("enabeld", ["enabled", "queue_name", "kms_key_id"]), Some("enabled"));
        assert_eq!(closest("queue-name", ["enabled", "queue_name"]), Some("queue_name"));
        assert_eq!(closest("prod-eats", ["prod-east", "prod-west", "staging"]), Some("prod-east"));
        assert_eq!(closest("Prod-East", ["prod-east"]), Some("prod-east"));
        assert_eq!(closest("retention", ["enabled", "queue_name", "kms_key_id", "rules"]), None, "nothing close");
        assert_eq!(closest("x", ["y", "zz"]), Some("y"));
        assert_eq!(closest("a", [] as [&str; 0]), None);
    }
}
