//! Rendering a doctor run (`DoctorReport`): a checklist for the terminal (worst first), or one JSON document.

use super::style::Style;
use crate::checks::catalog::title;
use crate::facts::finding::{Finding, Outcome, Severity};
use crate::facts::setup::Setup;
use serde_json::{Value, json};

/// What was found, and how, as JSON.
pub fn discovered(s: &Setup) -> Value {
    json!({
        "controller_role": s.controller.as_ref().map(|r| json!({"name": r.name, "arn": r.arn, "how": r.how, "exists": r.exists})),
        "identity_mode": s.mode,
        "node_roles": s.node_roles.iter().map(|r| json!({"name": r.name, "arn": r.arn, "how": r.how, "exists": r.exists})).collect::<Vec<_>>(),
        "queue": s.queue.as_ref().map(|q| json!({"name": q.name, "arn": q.arn, "url": q.url, "how": q.how, "exists": q.exists})),
        "rules": s.rules.iter().map(|r| json!({"name": r.name, "arn": r.arn, "enabled": r.enabled, "kinds": r.kinds, "queues": r.queue_arns, "other_cluster": r.other_cluster})).collect::<Vec<_>>(),
        "discovery": {
            "tag": format!("{}={}", s.discovery.tag_key, s.discovery.tag_value),
            "subnets": s.discovery.subnets,
            "security_groups": s.discovery.groups,
        },
    })
}

pub fn json_doc(s: &Setup, o: &Outcome, stats: Value) -> Value {
    let count = |sev: Severity| o.findings.iter().filter(|f| f.severity == sev).count();
    json!({
        "format_version": super::json::FORMAT_VERSION,
        "command": "doctor",
        "cluster": s.cluster,
        "account_id": s.account_id,
        "region": s.region,
        "karpenter_version": s.version.to_string(),
        "karpenter_version_from": s.version_from,
        "karpenter_support": s.today.map(|d| crate::checks::running::pin_support(s.version, d)),
        "discovered": discovered(s),
        "findings": o.findings.iter().map(finding_json).collect::<Vec<_>>(),
        "passed": o.passed(),
        "summary": {"errors": count(Severity::Error), "warnings": count(Severity::Warning), "notes": count(Severity::Note)},
        "stats": stats,
    })
}

/// A finding in doctor's document, the same fields as in every other document.
fn finding_json(f: &Finding) -> Value {
    json!({"code": f.code, "severity": f.severity, "resource": f.resource, "message": f.message, "fix": f.fix})
}

fn line(style: &Style, f: &Finding) -> String {
    let mark = match f.severity {
        Severity::Error => style.red("✗ error  "),
        Severity::Warning => style.yellow("! warning"),
        Severity::Note => "· note   ".to_string(),
    };
    format!("  {mark} {}  {}\n      {}\n      fix: {}\n", style.bold(f.code.as_str()), f.resource, f.message, f.fix)
}

/// The human report: what was found and how, then the checklist (errors, warnings, then the
/// checks that passed), then a summary line.
pub fn human(s: &Setup, o: &Outcome, style: Style) -> String {
    let mut out = format!(
        "karpctl doctor: cluster {} (account {}, region {}), checked against Karpenter {}{}\n\nFound:\n",
        s.cluster,
        s.account_id,
        s.region,
        s.version,
        s.today.map(|d| format!(" ({})", crate::running::support::support_on(s.version, d))).unwrap_or_default()
    );
    if !s.version_from.is_empty() {
        out.insert_str(out.len() - "\nFound:\n".len(), &format!("Karpenter {}: {}\n", s.version, s.version_from));
    }
    let none = "(none)".to_string();
    let ctrl = s.controller.as_ref().map(|r| format!("{}  ({})", r.name, r.how)).unwrap_or_else(|| none.clone());
    out += &format!("  controller role  {ctrl}\n");
    if s.node_roles.is_empty() {
        out += &format!("  node roles       {none}\n");
    }
    for (n, r) in s.node_roles.iter().enumerate() {
        let label = if n == 0 { "node roles      " } else { "                " };
        out += &format!("  {label} {}  ({})\n", r.name, r.how.join("; "));
    }
    let queue = s.queue.as_ref().map(|q| format!("{}  ({})", q.name, q.how)).unwrap_or_else(|| none.clone());
    out += &format!("  queue            {queue}\n");
    let d = &s.discovery;
    let mut azs: Vec<&str> = d.subnets.iter().map(|x| x.az.as_str()).collect();
    azs.sort();
    azs.dedup();
    out += &format!(
        "  discovery        {}={}: {} subnet(s) ({}), {} security group(s)\n\nChecks:\n",
        d.tag_key,
        d.tag_value,
        d.subnets.len(),
        azs.join(", "),
        d.groups.len()
    );
    for f in &o.findings {
        out += &line(&style, f);
    }
    for code in &o.passed() {
        out += &format!("  {} {}\n", style.green("✓"), title(*code));
    }
    let errors = o.findings.iter().filter(|f| f.severity == Severity::Error).count();
    let warnings = o.findings.iter().filter(|f| f.severity == Severity::Warning).count();
    out += &if errors + warnings == 0 {
        "\nNo problems found.\n".to_string()
    } else {
        format!("\n{errors} error(s), {warnings} warning(s).\n")
    };
    out
}
