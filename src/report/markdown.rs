//! `--output markdown`, pure: a pull-request comment rendered from the JSON documents (a summary
//! table, then a collapsible section per cluster with ```diff blocks for policies), cut to fit
//! GitHub's comment limit, saying what was cut.

use serde_json::Value;
use std::fmt::Write as _;

/// GitHub refuses comments longer than this (characters).
pub const GITHUB_COMMENT_LIMIT: usize = 65_536;
/// What the renderer aims at: room left for a caller's own header or footer.
pub const BUDGET: usize = 60_000;
const _: () = assert!(BUDGET < GITHUB_COMMENT_LIMIT);

/// One cluster's outcome: its JSON document (when it got that far) and its error (if any).
#[derive(Clone, Debug, Default)]
pub struct Section {
    pub cluster: String,
    pub account_id: String,
    pub region: String,
    pub doc: Option<Value>,
    pub error: Option<String>,
}

fn counts(doc: &Value) -> (u64, u64, u64) {
    let s = &doc["summary"];
    (s["add"].as_u64().unwrap_or(0), s["change"].as_u64().unwrap_or(0), s["destroy"].as_u64().unwrap_or(0))
}

/// The one-line result of a cluster, as the summary tables show it.
pub fn result_text(command: &str, s: &Section) -> String {
    if let Some(e) = &s.error {
        return format!("error: {}", e.lines().next().unwrap_or(""));
    }
    let Some(doc) = &s.doc else { return "no result".into() };
    if command == "output" {
        return "ok".into();
    }
    let (a, c, d) = counts(doc);
    if a + c + d == 0 && doc["conflicts"].as_array().is_none_or(|c| c.is_empty()) {
        return "in sync".into();
    }
    match command {
        "diff" => format!("{a} to add, {c} to change, {d} to destroy"),
        "down" => format!("done: {d} destroyed"),
        _ => format!("done: {a} added, {c} changed, {d} destroyed"),
    }
}

fn cell(s: &str) -> String {
    s.replace('|', "\\|").replace('\n', " ")
}

fn scalar(v: &Value) -> String {
    match v {
        Value::Null => "(none)".into(),
        other => other.to_string(),
    }
}

/// A fence longer than any run of backticks in `body`.
fn fence(body: &str) -> String {
    let longest = body.split(|c| c != '`').map(str::len).max().unwrap_or(0);
    "`".repeat(longest.max(2) + 1)
}

fn code_block(out: &mut String, lang: &str, body: &str) {
    let f = fence(body);
    let _ = writeln!(out, "{f}{lang}\n{}\n{f}", body.trim_end());
}

fn render_change(out: &mut String, c: &Value, action: &str) {
    let field = c["field"].as_str().unwrap_or("?");
    let (before, after) = (&c["before"], &c["after"]);
    let force = if c["forces_replacement"].as_bool() == Some(true) { " **(forces replacement)**" } else { "" };
    let structured = before.is_object() || after.is_object() || before.is_array() || after.is_array();
    if !structured {
        let text = match (before, after) {
            (Value::Null, a) => format!("`{}`", scalar(a)),
            (b, Value::Null) => format!("~~`{}`~~", scalar(b)),
            (b, a) => format!("`{}` → `{}`", scalar(b), scalar(a)),
        };
        let _ = writeln!(out, "- `{field}`: {text}{force}");
        return;
    }
    if field == "tags" && (before.is_object() || after.is_object()) {
        let (lines, unchanged) = crate::tags::changes(before, after);
        let mut body: Vec<String> = lines.into_iter().map(|(s, l)| format!("{s} {l}")).collect();
        if unchanged > 0 {
            body.push(format!("  # ({unchanged} unchanged {})", if unchanged == 1 { "tag" } else { "tags" }));
        }
        let _ = writeln!(out, "- `{field}`{force}\n");
        code_block(out, "diff", &body.join("\n"));
        out.push('\n');
        return;
    }
    let _ = writeln!(out, "- `{field}`{force}\n");
    let b = (!before.is_null()).then_some(before);
    let a = (!after.is_null()).then_some(after);
    if action == "create" || action == "delete" || b.is_none() || a.is_none() {
        let doc = serde_json::to_string_pretty(a.or(b).unwrap_or(&Value::Null)).unwrap_or_default();
        let sign = if a.is_some() { "+ " } else { "- " };
        let body: Vec<String> = doc.lines().map(|l| format!("{sign}{l}")).collect();
        code_block(out, "diff", &body.join("\n"));
    } else {
        code_block(out, "diff", &crate::policy::doc::render_diff(b, a).unwrap_or_default());
    }
    out.push('\n');
}

fn verb(action: &str) -> &'static str {
    match action {
        "create" => "be created",
        "update" => "be updated in place",
        "replace" => "be replaced",
        "delete" => "be destroyed",
        "adopt" => "be adopted (karpctl's tags added) and updated",
        _ => "change",
    }
}

/// The body of a cluster's `<details>` section (without the summary line).
fn section_body(s: &Section) -> String {
    let mut out = String::new();
    if let Some(e) = &s.error {
        out.push_str("**Error**\n\n");
        code_block(&mut out, "text", e);
        out.push('\n');
    }
    let Some(doc) = &s.doc else { return out };
    let pin = &doc["checks"]["karpenter"];
    if let (Some(v), Some(d)) = (pin["version"].as_str(), pin["detail"].as_str()) {
        let _ = writeln!(out, "Karpenter {v} (pinned): {d}.\n");
    }
    for f in doc["notes"].as_array().into_iter().flatten() {
        let level = if f["level"].as_str() == Some("warning") { "warning" } else { "note" };
        let _ = writeln!(out, "> **{level}:** {}", f["message"].as_str().unwrap_or_default());
    }
    if doc["notes"].as_array().is_some_and(|f| !f.is_empty()) {
        out.push('\n');
    }
    // The terminal's order: by kind (the graph's build order), then id.
    let mut steps: Vec<&Value> = doc["steps"].as_array().into_iter().flatten().collect();
    steps.sort_by_key(|s| {
        (serde_json::from_value::<crate::model::Kind>(s["kind"].clone()).ok(), s["id"].as_str().unwrap_or("").to_string())
    });
    for st in steps {
        let action = st["action"].as_str().unwrap_or("");
        let sym = match action {
            "create" => "+",
            "delete" => "-",
            "replace" => "-/+",
            _ => "~",
        };
        let _ = writeln!(
            out,
            "**`{sym}` `{}`** {} (`{}`) will {}\n",
            st["id"].as_str().unwrap_or(""),
            st["type"].as_str().unwrap_or(""),
            st["name"].as_str().unwrap_or(""),
            verb(action)
        );
        for n in st["notes"].as_array().into_iter().flatten() {
            let _ = writeln!(out, "> {}", n.as_str().unwrap_or_default());
        }
        if let Some(p) = st["removed_with"].as_str() {
            let _ = writeln!(out, "> removed together with `{p}`");
        }
        if st["notes"].as_array().is_some_and(|n| !n.is_empty()) || !st["removed_with"].is_null() {
            out.push('\n');
        }
        for c in st["changes"].as_array().into_iter().flatten() {
            render_change(&mut out, c, action);
        }
        out.push('\n');
    }
    for c in doc["conflicts"].as_array().into_iter().flatten() {
        let _ = writeln!(out, "- **conflict:** {}", c["message"].as_str().unwrap_or_default());
    }
    identity_switch_body(&mut out, &doc["identity_switch"]);
    readiness_body(&mut out, doc);
    out.push_str(&super::handoff::handoff_markdown(doc));
    out
}

/// An identity switch in progress, as the terminal says it (`IdentitySwitch::text`): the
/// headline in bold, then its lines as a list.
fn identity_switch_body(out: &mut String, s: &Value) {
    let Ok(s) = serde_json::from_value::<crate::model::IdentitySwitch>(s.clone()) else { return };
    let (head, lines) = s.text(false);
    let _ = writeln!(out, "**{head}**\n");
    for (depth, line) in lines {
        let _ = writeln!(out, "{}{line}", if depth > 1 { "  " } else { "- " });
    }
    out.push('\n');
}

/// The readiness checks as the terminal shows them: each finding with its fix (all passed: the
/// summary table's column says so, and nothing is added here).
fn readiness_body(out: &mut String, doc: &Value) {
    let found: Vec<&Value> = doc["checks"]["found"].as_array().into_iter().flatten().collect();
    if found.is_empty() {
        return;
    }
    let n = doc["checks"]["checked"].as_array().map_or(0, Vec::len);
    let passed = doc["checks"]["passed"].as_u64().unwrap_or(0);
    let _ = writeln!(
        out,
        "**Karpenter readiness: {passed} of {n} checks passed**
"
    );
    for c in found {
        let _ = writeln!(
            out,
            "- **{}** `{}` {}: {}<br>fix: {}",
            c["severity"].as_str().unwrap_or_default(),
            c["code"].as_str().unwrap_or_default(),
            c["resource"].as_str().unwrap_or_default(),
            c["message"].as_str().unwrap_or_default(),
            c["fix"].as_str().unwrap_or_default()
        );
    }
    out.push('\n');
}

/// The readiness verdict for the summary table: "-" when the command ran no checks.
fn verdict(s: &Section) -> String {
    let Some(checks) = s.doc.as_ref().map(|d| &d["checks"]).filter(|c| c.is_object()) else { return "-".into() };
    let n = checks["checked"].as_array().map_or(0, Vec::len);
    let found: Vec<&Value> = checks["found"].as_array().into_iter().flatten().collect();
    let errors = found.iter().filter(|c| c["severity"] == "error").count();
    let warnings = found.iter().filter(|c| c["severity"] == "warning").count();
    match (errors, warnings) {
        (0, 0) => format!("can work ({n} of {n} checks passed)"),
        (0, w) => format!("can work, {w} warning(s)"),
        (e, _) => format!("**cannot work**: {e} error(s)"),
    }
}

/// `body` cut at a line boundary to at most `max` characters, with any open code fence closed and
/// a line saying what was cut.
fn cut(body: &str, max: usize, cluster: &str) -> String {
    if body.len() <= max {
        return body.to_string();
    }
    let note_room = 300;
    let keep_to = max.saturating_sub(note_room);
    let mut kept = String::new();
    let mut open: Option<String> = None;
    let mut lines = body.lines();
    for line in lines.by_ref() {
        if kept.len() + line.len() + 1 > keep_to {
            break;
        }
        let t = line.trim_start();
        if t.starts_with("```") {
            let ticks: String = t.chars().take_while(|c| *c == '`').collect();
            match &open {
                Some(f) if *f == ticks && t.len() == ticks.len() => open = None,
                None => open = Some(ticks),
                _ => {}
            }
        }
        kept.push_str(line);
        kept.push('\n');
    }
    let left: usize = body.lines().count() - kept.lines().count();
    if let Some(f) = open {
        let _ = writeln!(kept, "{f}");
    }
    let _ = writeln!(
        kept,
        "\n*Cut to fit GitHub's comment limit: {left} more line(s) ({} characters) of this cluster's changes are not shown; run `karpctl diff --cluster {cluster}` for the full plan.*",
        body.len() - kept.len().min(body.len())
    );
    kept
}

/// The whole comment: a title, the summary table, and a `<details>` section per cluster that has
/// something to show. Sections longer than their fair share of `budget` are cut.
pub fn render_with_budget(command: &str, sections: &[Section], budget: usize) -> String {
    let mut head = String::new();
    let _ = writeln!(head, "### karpctl {command}\n");
    let _ = writeln!(head, "| Cluster | Account | Region | Result | Karpenter |\n|---|---|---|---|---|");
    let mut rows_cut = 0;
    for (i, s) in sections.iter().enumerate() {
        let row = format!(
            "| `{}` | {} | {} | {} | {} |\n",
            cell(&s.cluster),
            cell(if s.account_id.is_empty() { "-" } else { &s.account_id }),
            cell(if s.region.is_empty() { "-" } else { &s.region }),
            cell(&result_text(command, s)),
            cell(&verdict(s))
        );
        if head.len() + row.len() > budget / 2 {
            rows_cut = sections.len() - i;
            break;
        }
        head.push_str(&row);
    }
    if rows_cut > 0 {
        let _ = writeln!(head, "\n*{rows_cut} more cluster(s) not shown: the comment would exceed GitHub's limit.*");
    }
    head.push('\n');
    // The sections with something to show, shortest first: each gets at most its fair share of
    // what is left, and what a short one leaves over goes to the longer ones.
    let shown = sections.len() - rows_cut;
    let mut bodies: Vec<(usize, String, String)> = sections[..shown]
        .iter()
        .enumerate()
        .filter_map(|(i, s)| {
            let body = section_body(s);
            (!body.trim().is_empty()).then(|| {
                let summary = format!(
                    "<details><summary><b>{}</b>: {}</summary>\n\n",
                    html_escape(&s.cluster),
                    html_escape(&result_text(command, s))
                );
                (i, summary, body)
            })
        })
        .collect();
    let mut order: Vec<usize> = (0..bodies.len()).collect();
    order.sort_by_key(|&k| bodies[k].1.len() + bodies[k].2.len());
    let mut left = budget.saturating_sub(head.len());
    let mut remaining = bodies.len();
    for k in order {
        let (i, summary, body) = &mut bodies[k];
        let frame = summary.len() + "\n</details>\n\n".len();
        let share = left / remaining.max(1);
        let max_body = share.saturating_sub(frame);
        *body = cut(body, max_body, &sections[*i].cluster);
        left = left.saturating_sub(frame + body.len());
        remaining -= 1;
    }
    bodies.sort_by_key(|b| b.0);
    let mut out = head;
    for (_, summary, body) in bodies {
        out.push_str(&summary);
        out.push_str(&body);
        out.push_str("\n</details>\n\n");
    }
    out.trim_end().to_string() + "\n"
}

pub fn render(command: &str, sections: &[Section]) -> String {
    render_with_budget(command, sections, BUDGET)
}

fn html_escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn policy(n: usize, extra: bool) -> Value {
        let mut stmts: Vec<Value> = (0..n)
            .map(|i| json!({"Sid": format!("Statement{i}"), "Effect": "Allow", "Action": [format!("ec2:Describe{i}")], "Resource": ["*"]}))
            .collect();
        if extra {
            for s in stmts.iter_mut() {
                s["Condition"] = json!({"StringEquals": {"aws:RequestedRegion": "us-east-1"}});
            }
        }
        json!({"Version": "2012-10-17", "Statement": stmts})
    }

    fn diff_doc(cluster: &str, statements: usize) -> Value {
        json!({
            "format_version": 1, "command": "diff", "cluster": cluster, "account_id": "123456789012", "region": "us-east-1",
            "in_sync": false, "summary": {"add": 1, "change": 1, "destroy": 1},
            "steps": [
                {"id": "queue", "kind": "queue", "type": "aws_sqs_queue", "name": format!("Karpenter-{cluster}"), "action": "create",
                 "changes": [{"field": "MessageRetentionPeriod", "before": null, "after": "300"}], "notes": [], "ids": {}},
                {"id": "controller-policy-IAMIntegration", "kind": "iam_policy", "type": "aws_iam_policy",
                 "name": format!("KarpenterControllerIAMIntegrationPolicy-{cluster}"), "action": "update",
                 "changes": [{"field": "PolicyDocument", "before": policy(statements, false), "after": policy(statements, true)}], "notes": [], "ids": {}},
                {"id": "rule-Old", "kind": "event_rule", "type": "aws_cloudwatch_event_rule", "name": "Karpenter-old", "action": "delete",
                 "changes": [{"field": "State", "before": "ENABLED", "after": null}], "notes": ["no longer in the plan"], "ids": {}}
            ],
            "conflicts": [], "notes": [{"id": "discovery", "level": "warning", "message": "subnet-0c has 12 free addresses"}],
            "unchanged": ["node-role"],
        })
    }

    fn in_sync(cluster: &str) -> Section {
        Section {
            cluster: cluster.into(),
            account_id: "123456789012".into(),
            region: "eu-west-1".into(),
            doc: Some(json!({"summary": {"add": 0, "change": 0, "destroy": 0}, "steps": [], "conflicts": [], "notes": []})),
            error: None,
        }
    }

    fn changed(cluster: &str, statements: usize) -> Section {
        Section {
            cluster: cluster.into(),
            account_id: "123456789012".into(),
            region: "us-east-1".into(),
            doc: Some(diff_doc(cluster, statements)),
            error: None,
        }
    }

    #[test]
    fn the_comment_carries_the_readiness_verdict_and_the_terminals_order() {
        let mut s = changed("say-when-east", 1);
        s.doc.as_mut().unwrap()["checks"] = json!({
            "checked": ["subnet-no-way-out", "kms-key-policy-events", "security-group-rules"],
            "found": [{"code": "subnet-no-way-out", "severity": "error", "resource": "subnet-0a",
                       "message": "nodes there cannot reach EC2", "fix": "add a NAT route"}],
            "passed": 2,
        });
        let md = render("diff", &[s, in_sync("other")]);
        assert!(md.contains("| Result | Karpenter |"), "{md}");
        assert!(md.contains("**cannot work**: 1 error(s)"), "{md}");
        assert!(md.contains("**Karpenter readiness: 2 of 3 checks passed**"), "{md}");
        assert!(
            md.contains("- **error** `subnet-no-way-out` subnet-0a: nodes there cannot reach EC2<br>fix: add a NAT route"),
            "{md}"
        );
        // The terminal lists by kind in the graph's order (policy, queue, rule), then id.
        let (p, q, r) =
            (md.find("controller-policy-IAMIntegration").unwrap(), md.find("`queue`").unwrap(), md.find("rule-Old").unwrap());
        assert!(p < q && q < r, "{md}");
    }

    #[test]
    fn snapshot_markdown_one_cluster() {
        insta::assert_snapshot!(render("diff", &[changed("say-when-east", 2)]));
    }

    #[test]
    fn snapshot_markdown_many_clusters() {
        let broken = Section {
            cluster: "broken".into(),
            error: Some("plans/broken.toml:3: `region` \"mars-1\" is not an AWS region\nhint: use a region name".into()),
            ..Default::default()
        };
        insta::assert_snapshot!(render("diff", &[changed("a", 1), in_sync("b"), broken]));
    }

    #[test]
    fn snapshot_markdown_long_policy_diff_is_cut_to_size() {
        let out = render("diff", &[changed("huge", 3000), in_sync("b")]);
        assert!(out.len() <= BUDGET && out.len() < GITHUB_COMMENT_LIMIT, "{}", out.len());
        assert!(out.contains("Cut to fit GitHub's comment limit"));
        // Every code fence opened is closed.
        assert_eq!(out.lines().filter(|l| l.trim_start().starts_with("```")).count() % 2, 0);
        let lines: Vec<&str> = out.lines().collect();
        let tail = lines[lines.len().saturating_sub(12)..].join("\n");
        insta::assert_snapshot!(tail);
    }

    /// A takeover's retired policy is a `-` and counted in "to destroy", in the table and in
    /// its section.
    #[test]
    fn snapshot_markdown_takeover() {
        let plan = crate::report::human::tests::takeover_plan();
        let doc = crate::report::json::plan_json("diff", "c", "123456789012", "us-east-1", &plan, None, json!({}));
        let s = Section {
            cluster: "c".into(),
            account_id: "123456789012".into(),
            region: "us-east-1".into(),
            doc: Some(doc),
            error: None,
        };
        let out = render("diff", &[s]);
        assert!(out.contains("| 1 to add, 1 to change, 1 to destroy |"), "{out}");
        assert!(out.contains("**`-` `retired-policy-KarpenterController-2024`**"), "{out}");
        insta::assert_snapshot!(out);
    }

    #[test]
    fn many_cut_sections_share_the_budget() {
        let sections: Vec<Section> = (0..30).map(|i| changed(&format!("c{i}"), 400)).collect();
        let out = render("diff", &sections);
        assert!(out.len() <= BUDGET, "{}", out.len());
        assert_eq!(out.matches("<details>").count(), 30);
        assert_eq!(out.matches("</details>").count(), 30);
    }

    #[test]
    fn results_read_as_the_summary_says() {
        assert_eq!(result_text("diff", &in_sync("b")), "in sync");
        assert_eq!(result_text("diff", &changed("a", 1)), "1 to add, 1 to change, 1 to destroy");
        assert_eq!(result_text("up", &changed("a", 1)), "done: 1 added, 1 changed, 1 destroyed");
        let e = Section { error: Some("first\nsecond".into()), ..Default::default() };
        assert_eq!(result_text("up", &e), "error: first");
    }
}
