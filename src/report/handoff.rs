//! After `up`: what `karpctl output` hands on to Karpenter that this run changed (the Helm
//! values, the EC2NodeClass), why, and the commands that pass it on, in every output format.

use super::style::Style;
use serde::Serialize;
use serde_json::Value;
use std::fmt::Write as _;

/// What changed in what `output` prints, and the commands to run (empty: nothing changed).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Handoff {
    /// Why the Helm values changed (a queue made or deleted, the controller role, the pin).
    pub helm_values: Vec<String>,
    /// Why the EC2NodeClass changed (the node role, the instance profile).
    pub nodeclass: Vec<String>,
    /// `karpctl output ... > values.yaml` then `helm upgrade ...` (when the values changed).
    pub helm_commands: Vec<String>,
    /// `karpctl output ... | kubectl diff -f -` then `... | kubectl apply -f -`.
    pub kubectl_commands: Vec<String>,
}

impl Handoff {
    pub fn is_empty(&self) -> bool {
        self.helm_values.is_empty() && self.nodeclass.is_empty()
    }
}

/// The `next_steps` object of `up`'s JSON document (null when nothing handed on changed).
pub fn handoff_json(h: Option<&Handoff>) -> Value {
    h.filter(|h| !h.is_empty()).map(|h| serde_json::to_value(h).unwrap_or_default()).unwrap_or(Value::Null)
}

/// The human text: one `next:` paragraph per thing to pass on, each with its commands.
pub fn handoff_text(h: &Handoff, style: Style) -> String {
    let mut out = String::new();
    let mut paragraph = |what: &str, then: &str, why: &[String], commands: &[String]| {
        if why.is_empty() {
            return;
        }
        let _ = writeln!(out, "{}: {what} ({}); {then}:", style.bold("next"), why.join("; "));
        for c in commands {
            let _ = writeln!(out, "  {c}");
        }
    };
    paragraph("Karpenter's Helm values changed", "pass them on", &h.helm_values, &h.helm_commands);
    paragraph("the EC2NodeClass changed", "review the difference, then apply it", &h.nodeclass, &h.kubectl_commands);
    out
}

/// The Markdown block from a plan document's `next_steps` (empty when there is none).
pub fn handoff_markdown(doc: &Value) -> String {
    let h = &doc["next_steps"];
    if !h.is_object() {
        return String::new();
    }
    let list = |k: &str| -> Vec<String> {
        h[k].as_array().into_iter().flatten().filter_map(|v| v.as_str()).map(str::to_string).collect()
    };
    let mut out = String::from("**Next steps**\n\n");
    let mut commands = Vec::new();
    if !list("helm_values").is_empty() {
        let _ = writeln!(out, "- Karpenter's Helm values changed: {}", list("helm_values").join("; "));
        commands.extend(list("helm_commands"));
    }
    if !list("nodeclass").is_empty() {
        let _ = writeln!(out, "- the EC2NodeClass changed: {}", list("nodeclass").join("; "));
        commands.extend(list("kubectl_commands"));
    }
    let _ = writeln!(out, "\n```sh\n{}\n```\n", commands.join("\n"));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Handoff {
        Handoff {
            helm_values: vec!["SQS queue Karpenter-c was created (settings.interruptionQueue)".into()],
            nodeclass: vec![],
            helm_commands: vec!["karpctl output --cluster c --format helm > values.yaml".into(), "helm upgrade ...".into()],
            kubectl_commands: vec!["karpctl output --cluster c --format nodeclass | kubectl apply -f -".into()],
        }
    }

    #[test]
    fn each_format_says_what_changed_and_the_commands_only_for_what_changed() {
        let h = sample();
        let text = handoff_text(&h, Style { color: false });
        assert!(text.starts_with("next: Karpenter's Helm values changed (SQS queue Karpenter-c was created"), "{text}");
        assert!(text.contains("\n  helm upgrade ...\n"), "{text}");
        assert!(!text.contains("kubectl"), "the EC2NodeClass did not change: {text}");
        let doc = serde_json::json!({"next_steps": handoff_json(Some(&h))});
        let md = handoff_markdown(&doc);
        assert!(md.contains("```sh\nkarpctl output --cluster c --format helm > values.yaml\nhelm upgrade ...\n```"), "{md}");
        assert!(!md.contains("kubectl"), "{md}");
        assert_eq!(handoff_json(Some(&Handoff::default())), Value::Null);
        assert_eq!(handoff_markdown(&serde_json::json!({"next_steps": null})), "");
    }
}
