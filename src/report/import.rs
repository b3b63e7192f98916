//! `karpctl import`'s report: what it found, the plan file it wrote, what `up --adopt` will then
//! change, and how to let go of the objects in the tool that made them (human text and JSON).

use super::PlanReport;
use super::style::Style;
use crate::aws::StatsReport;
use serde_json::{Value, json};
use std::path::PathBuf;

/// How to let go of the objects in the tool that made them.
#[derive(Clone, Debug, PartialEq)]
pub enum LetGo {
    /// `terraform state rm` of the module's resource addresses (and the `removed` block).
    Terraform {
        module: String,
        addresses: Vec<String>,
    },
    /// Delete the stacks while retaining their resources.
    CloudFormation {
        stacks: Vec<String>,
    },
    Unknown,
}

#[derive(Debug)]
pub struct ImportReport {
    pub cluster: String,
    pub path: PathBuf,
    /// The plan file as written.
    pub text: String,
    /// What import could not tell or left alone.
    pub notes: Vec<String>,
    /// (piece, what was found).
    pub found_lines: Vec<(String, String)>,
    /// The read-only `diff --adopt` with the written plan.
    pub diff: PlanReport,
    pub let_go: LetGo,
    pub stats: StatsReport,
}

/// Single quotes for a POSIX shell (addresses carry `"` and `[`).
fn sh(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// The let-go steps, as lines of text.
pub fn let_go_text(l: &LetGo) -> String {
    let mut t = String::new();
    match l {
        LetGo::Terraform { module, addresses } => {
            t.push_str("Let go of them in Terraform first (no AWS change), so that it does not fight karpctl:\n\n");
            if addresses.is_empty() {
                t.push_str(&format!("  terraform state rm {}\n", sh(module)));
            } else {
                t.push_str("  terraform state rm \\\n");
                let lines: Vec<String> = addresses.iter().map(|a| format!("    {}", sh(a))).collect();
                t.push_str(&lines.join(" \\\n"));
                t.push('\n');
            }
            t.push_str(&format!(
                "\nthen delete the `{m}` block from your configuration (else the next plan makes them again).\n\
                 With Terraform 1.7 or later, instead of state rm: delete the block and add\n\n\
                 \x20 removed {{\n    from = {m}\n    lifecycle {{\n      destroy = false\n    }}\n  }}\n\n\
                 (`removed` takes a whole module or resource, never one instance, and only once its block is gone.)\n",
                m = module
            ));
        }
        LetGo::CloudFormation { stacks } => {
            t.push_str("Let go of them in CloudFormation first: delete each stack while retaining its resources.\n");
            for s in stacks {
                t.push_str(&format!(
                    "\n  aws cloudformation get-template --stack-name {s} --query TemplateBody --output text > {s}.yaml\n\
                     \x20 # add `DeletionPolicy: Retain` to every resource in {s}.yaml, then:\n\
                     \x20 aws cloudformation update-stack --stack-name {s} --template-body file://{s}.yaml \\\n\
                     \x20   --capabilities CAPABILITY_NAMED_IAM --parameters ParameterKey=ClusterName,UsePreviousValue=true\n\
                     \x20 aws cloudformation wait stack-update-complete --stack-name {s}\n\
                     \x20 aws cloudformation delete-stack --stack-name {s}\n\
                     \x20 aws cloudformation wait stack-delete-complete --stack-name {s}\n"
                ));
            }
            t.push_str(
                "\n(`delete-stack --retain-resources` works only on a stack that already failed to delete; the\n\
                 update with `Retain` works from any state. Leave out `--parameters` for a stack without\n\
                 a ClusterName parameter. Do not run `eksctl delete podidentityassociation`: it deletes the role.)\n",
            );
        }
        LetGo::Unknown => t.push_str(
            "These objects were not made by the Terraform module or the CloudFormation stack (by their names): remove\n\
             them from whatever manages them without deleting them, so that it does not undo karpctl's changes.\n",
        ),
    }
    t
}

pub fn human(r: &ImportReport, style: Style) -> String {
    let mut t = format!("karpctl import: cluster {}\n\nFound:\n", r.cluster);
    let width = r.found_lines.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    for (k, v) in &r.found_lines {
        t.push_str(&format!("  {k:width$}  {v}\n"));
    }
    t.push_str(&format!("\nWrote {}:\n\n", r.path.display()));
    for l in r.text.lines() {
        t.push_str(&format!("  {l}\n"));
    }
    for n in &r.notes {
        t.push_str(&format!("\n{} {n}", style.yellow("note:")));
    }
    if !r.notes.is_empty() {
        t.push('\n');
    }
    t.push_str(&format!("\nWhat `karpctl up --cluster {} --adopt` will then change:\n\n", r.cluster));
    t.push_str(&super::human::render_plan(&r.diff.plan, style));
    // An error-level check makes `up --adopt` exit 1 after applying: say so now.
    if let Some(checks) = &r.diff.readiness {
        t.push_str(&super::human::readiness(checks, style));
    }
    t.push('\n');
    t.push_str(&let_go_text(&r.let_go));
    t.push_str(&format!(
        "\nThen: karpctl up --cluster {c} --adopt   ({})\n      karpctl diff --cluster {c}          (exit 0)\n",
        up_adopt_summary(&r.diff.plan),
        c = r.cluster
    ));
    t
}

/// What `up --adopt` does, in a few words: "nothing is deleted" only when nothing is.
fn up_adopt_summary(plan: &crate::model::Plan) -> String {
    let (_, _, destroy) = plan.counts();
    if destroy == 0 {
        "one run; nothing is deleted or made again".to_string()
    } else {
        format!("one run; nothing is made again; the {destroy} step(s) marked - above take off what karpctl's policies replace")
    }
}

pub fn json_doc(r: &ImportReport) -> Value {
    let let_go = match &r.let_go {
        LetGo::Terraform { module, addresses } => json!({"tool": "terraform", "module": module, "state_rm": addresses}),
        LetGo::CloudFormation { stacks } => json!({"tool": "cloudformation", "stacks": stacks}),
        LetGo::Unknown => json!({"tool": null}),
    };
    json!({
        "format_version": 1,
        "command": "import",
        "cluster": r.cluster,
        "plan_file": r.path.display().to_string(),
        "plan_text": r.text,
        "found": r.found_lines.iter().map(|(k, v)| json!({"piece": k, "found": v})).collect::<Vec<_>>(),
        "notes": r.notes,
        "up_adopt": super::json::plan_doc(&r.diff),
        "let_go": let_go,
        "stats": serde_json::to_value(&r.stats).unwrap_or_default(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// "Nothing is deleted" only when the plan deletes nothing.
    #[test]
    fn the_closing_line_says_nothing_is_deleted_only_when_true() {
        let mut plan = crate::report::human::tests::takeover_plan();
        let with_retirement = up_adopt_summary(&plan);
        assert!(!with_retirement.contains("nothing is deleted"), "{with_retirement}");
        assert!(with_retirement.contains("the 1 step(s) marked -"), "{with_retirement}");
        plan.steps.retain(|s| s.action != crate::model::Action::Delete);
        assert_eq!(up_adopt_summary(&plan), "one run; nothing is deleted or made again");
    }
}
