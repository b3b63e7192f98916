//! The examples in docs/ that a renderer prints: each block between `<!-- generated: NAME -->` and
//! `<!-- end generated -->` must equal the renderer's output for its fixture below
//! (`KARPCTL_BLESS_DOCS=1` rewrites them after a deliberate change).

use super::human::tests::{mixed_plan, step};
use super::markdown::{self, Section};
use super::values::ClusterRun;
use crate::model::{Action, Change, Kind, Plan};
use serde_json::{Value, json};
use std::path::Path;

/// A plan with one rule to create, as `diff --output json` documents it.
fn one_rule_doc() -> Value {
    let plan = Plan {
        steps: vec![step(
            "rule-Rebalance",
            Kind::EventRule,
            Action::Create,
            vec![Change { field: "State".into(), before: Value::Null, after: json!("ENABLED"), forces_replacement: false }],
        )],
        in_sync: vec!["queue".into(), "queue-policy".into()],
        ..Default::default()
    };
    let stats = json!({"calls": 21, "reads": 21, "writes": 0, "retries": 0, "operations": {"SQS:GetQueueUrl": {"calls": 1, "attempts": 1}}});
    let mut doc = super::json::plan_json("diff", "say-when-east", "000000000000", "us-east-1", &plan, None, stats);
    doc["steps"][0]["name"] = json!("Karpenter-say-when-east-Rebalance");
    doc
}

fn run(cluster: &str, account: &str, region: &str, doc: Option<Value>, error: Option<&str>) -> ClusterRun {
    ClusterRun {
        section: Section {
            cluster: cluster.into(),
            account_id: account.into(),
            region: region.into(),
            doc: doc.clone(),
            error: error.map(str::to_string),
        },
        code: 0,
        plan: None,
        doc,
        text: None,
        stats: Value::Null,
    }
}

fn summary(add: u64, change: u64) -> Value {
    json!({"summary": {"add": add, "change": change, "destroy": 0}, "conflicts": []})
}

/// (file, block name, fence, what the renderer prints).
fn examples() -> Vec<(&'static str, &'static str, &'static str, String)> {
    let plain = super::Style { color: false };
    let section = Section {
        cluster: "say-when-east".into(),
        account_id: "000000000000".into(),
        region: "us-east-1".into(),
        doc: Some(one_rule_doc()),
        error: None,
    };
    vec![
        ("docs/reference.md", "plan-human", "```", super::human::render_plan(&mixed_plan(), plain)),
        ("docs/reference.md", "diff-json", "```json", serde_json::to_string_pretty(&one_rule_doc()).unwrap()),
        ("docs/reference.md", "diff-markdown", "````markdown", markdown::render("diff", &[section])),
        (
            "docs/reference.md",
            "identity-switch-human",
            "```",
            super::human::identity_switch(&crate::identity_switch::tests::waiting_example(), plain, false),
        ),
        (
            "docs/ci.md",
            "fleet-summary-human",
            "```",
            super::human::summary_table(
                "diff",
                &[
                    run("prod-east", "111111111111", "us-east-1", Some(summary(0, 0)), None),
                    run("prod-west", "111111111111", "us-west-2", Some(summary(2, 1)), None),
                    run(
                        "staging",
                        "222222222222",
                        "eu-west-1",
                        None,
                        Some("EKS cluster staging does not exist in region eu-west-1"),
                    ),
                ],
            ),
        ),
    ]
}

/// The text of block `name` in `doc`, and where it sits (start and end byte of its body).
fn block<'a>(doc: &'a str, name: &str) -> Option<(usize, usize, &'a str)> {
    let open = format!("<!-- generated: {name} -->\n");
    let start = doc.find(&open)? + open.len();
    let end = start + doc[start..].find("<!-- end generated -->")?;
    Some((start, end, &doc[start..end]))
}

#[test]
fn docs_examples_match_the_renderers() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let bless = crate::settings::Settings::from_env().bless_docs;
    let mut drift = Vec::new();
    for (file, name, fence, text) in examples() {
        let path = root.join(file);
        let doc = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{file}: {e}"));
        let (start, end, body) = block(&doc, name).unwrap_or_else(|| panic!("{file} has no generated block {name}"));
        let closing = fence.trim_end_matches(|c: char| c.is_alphabetic());
        let want = format!("{fence}\n{}\n{closing}\n", text.trim_end());
        if body != want {
            if bless {
                std::fs::write(&path, format!("{}{want}{}", &doc[..start], &doc[end..])).unwrap();
            } else {
                drift.push(format!("{file} block {name}:\n--- docs\n{body}\n--- renderer\n{want}"));
            }
        }
    }
    assert!(drift.is_empty(), "docs examples drifted (run KARPCTL_BLESS_DOCS=1 cargo test docs_examples):\n{}", drift.join("\n"));
}
