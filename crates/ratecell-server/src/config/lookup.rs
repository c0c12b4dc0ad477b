//! Which rule a request's descriptor falls under, and under which names it
//! is counted: envoyproxy/ratelimit's matching, step for step (exact
//! `key_value` first, then a wildcard value, then the bare key; the rule
//! applies only at the descriptor's last entry), so the same files select
//! the same limits.

use std::sync::Arc;

use super::{Config, Node, Rule};

/// The rule a descriptor falls under.
#[derive(Debug)]
pub struct Match {
    pub rule: Arc<Rule>,
    /// The statistics key (`domain.key_value…`), the rule's path unless
    /// `detailed_metric`, `value_to_metric` or `share_threshold` say
    /// otherwise.
    pub stats_key: String,
    /// Per entry, the wildcard pattern that replaces its value in the
    /// limit's key (`share_threshold`): every matching value shares one
    /// count.
    pub shared_values: Vec<Option<String>>,
}

/// Matches an `*`-split pattern against `value`, as the incumbent does
/// (prefix, suffix, then the middle parts in order).
fn wildcard_match(parts: &[String], value: &str) -> bool {
    let (Some(first), Some(last)) = (parts.first(), parts.last()) else {
        return false;
    };
    if parts.len() == 1 {
        return first == value;
    }
    if !value.starts_with(first.as_str()) || !value.ends_with(last.as_str()) {
        return false;
    }
    if value.len() < parts.iter().map(String::len).sum::<usize>() {
        return false;
    }
    let mut rest = &value[first.len()..value.len() - last.len()];
    for part in &parts[1..parts.len() - 1] {
        match rest.find(part.as_str()) {
            Some(i) => rest = &rest[i + part.len()..],
            None => return false,
        }
    }
    true
}

impl Config {
    /// The rule `entries` (key, value pairs) fall under in `domain`.
    pub fn lookup<'e>(
        &self,
        domain: &str,
        entries: impl ExactSizeIterator<Item = (&'e str, &'e str)> + Clone,
    ) -> Option<Match> {
        let d = self.domains.get(domain)?;
        let n = entries.len();
        let mut level: &Node = &d.root;
        let mut found: Option<Arc<Rule>> = None;
        let mut detailed = String::from(domain);
        let mut by_value = String::from(domain);
        let mut shared: Vec<Option<String>> = Vec::new();

        for (i, (key, value)) in entries.clone().enumerate() {
            let exact = format!("{key}_{value}");
            detailed.push('.');
            detailed.push_str(&exact);

            let mut next = level.children.get(&exact);
            let mut wildcard_key: Option<&str> = None;
            if next.is_none()
                && let Some(w) = level
                    .wildcards
                    .iter()
                    .find(|w| wildcard_match(&w.parts, &exact))
            {
                next = level.children.get(&w.key);
                wildcard_key = Some(&w.key);
            }
            let by_exact_value = next.is_some();
            if next.is_none() {
                next = level.children.get(key);
            }

            by_value.push('.');
            by_value.push_str(key);
            if let Some(node) = next {
                let prefix_len = key.len() + 1;
                let shown = match wildcard_key {
                    Some(_) if node.share_threshold && !node.wildcard_pattern.is_empty() => {
                        let pattern = node.wildcard_pattern
                            [prefix_len.min(node.wildcard_pattern.len())..]
                            .to_owned();
                        if shared.len() < n {
                            shared.resize(n, None);
                        }
                        shared[i] = Some(pattern.clone());
                        pattern
                    }
                    Some(_) if node.value_to_metric => value.to_owned(),
                    Some(w) => w[prefix_len.min(w.len())..].to_owned(),
                    None if by_exact_value || node.value_to_metric => value.to_owned(),
                    None => String::new(),
                };
                if !shown.is_empty() {
                    by_value.push('_');
                    by_value.push_str(&shown);
                }
                if let Some(rule) = &node.rule
                    && i == n - 1
                {
                    found = Some(rule.clone());
                }
            }
            match next {
                Some(node) if !node.children.is_empty() => level = node,
                _ => break,
            }
        }

        let rule = found?;
        let stats_key = if rule.detailed_metric {
            if shared.is_empty() {
                detailed
            } else {
                let mut k = String::from(domain);
                for (i, (key, value)) in entries.enumerate() {
                    k.push('.');
                    k.push_str(key);
                    match shared.get(i).and_then(Option::as_deref) {
                        Some(p) => {
                            k.push('_');
                            k.push_str(p);
                        }
                        None if !value.is_empty() => {
                            k.push('_');
                            k.push_str(value);
                        }
                        None => {}
                    }
                }
                k
            }
        } else {
            by_value
        };
        Some(Match {
            rule,
            stats_key,
            shared_values: shared,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::wildcard_match;

    fn parts(p: &str) -> Vec<String> {
        p.split('*').map(str::to_owned).collect()
    }

    #[test]
    fn wildcards_match_as_the_incumbents() {
        assert!(wildcard_match(&parts("path_/api/*"), "path_/api/users"));
        assert!(wildcard_match(&parts("path_/api/*"), "path_/api/"));
        assert!(!wildcard_match(&parts("path_/api/*"), "path_/ap"));
        assert!(wildcard_match(&parts("k_a*b*c"), "k_aXbYc"));
        assert!(!wildcard_match(&parts("k_a*b*c"), "k_aXc"));
        assert!(
            !wildcard_match(&parts("k_ab*ba"), "k_aba"),
            "overlapping prefix and suffix"
        );
    }
}
