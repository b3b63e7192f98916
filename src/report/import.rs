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
    /// `terraform state rm` of the whole module (or the `removed` block): a hand-picked list of
    /// addresses misses what the module made for the user's settings, and Terraform destroys
    /// whatever stays in state once the module block is deleted.
    Terraform {
        module: String,
    },
    /// Give every resource of each stack `DeletionPolicy: Retain`, then delete the stack.
    CloudFormation {
        stacks: Vec<Stack>,
    },
    Unknown,
}

/// A CloudFormation stack to let go of, with the parameters it really has (eksctl's role stacks
/// have none; the getting-started stack has `ClusterName`).
#[derive(Clone, Debug, PartialEq)]
pub struct Stack {
    pub name: String,
    pub parameters: Vec<String>,
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
    /// The read-only `diff --adopt` with the written plan, or why it was refused (the error and
    /// its hint, as text).
    pub diff: Result<PlanReport, String>,
    pub let_go: LetGo,
    pub stats: StatsReport,
}

/// Single quotes for a POSIX shell (addresses carry `"` and `[`).
fn sh(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// The let-go steps, as lines of text. Nothing printed here can delete an object: Terraform
/// forgets the whole module, and `delete-stack` runs only after the stored template was checked
/// to retain every resource (docs/import.md).
pub fn let_go_text(l: &LetGo) -> String {
    let mut t = String::new();
    match l {
        LetGo::Terraform { module } => {
            t.push_str(
                "Let go of them in Terraform first (no AWS change), so that it neither fights karpctl nor destroys them:\n\n",
            );
            t.push_str(&format!("  terraform state rm {}\n", sh(module)));
            t.push_str(&format!(
                "\nthen delete the `{m}` block from your configuration (else the next apply makes them again).\n\
                 Or, with Terraform 1.7 or later, instead of state rm: delete the block and add\n\n\
                 \x20 removed {{\n    from = {m}\n    lifecycle {{\n      destroy = false\n    }}\n  }}\n\n\
                 Either way, `terraform plan` must show 0 to destroy before you apply.\n",
                m = module
            ));
        }
        LetGo::CloudFormation { stacks } => {
            t.push_str(
                "Let go of them in CloudFormation first: give every resource of each stack `DeletionPolicy: Retain`,\n\
                 then delete the stack (its resources stay). Each block below is one command chained with `&&`:\n\
                 a failed step stops it, so a failed update never reaches delete-stack, and delete-stack runs\n\
                 only once the stored template retains as many resources as the stack has. Needs jq.\n",
            );
            for s in stacks {
                t.push_str(&cfn_steps(s));
            }
            t.push_str(
                "\n(If update-stack says \"No updates are to be performed\", the template already retains: run the\n\
                 chain from `test`. `delete-stack --retain-resources` works only on a stack that already failed\n\
                 to delete. Do not run `eksctl delete podidentityassociation` or `eksctl delete iamserviceaccount`:\n\
                 they delete the role.)\n",
            );
        }
        LetGo::Unknown => t.push_str(
            "These objects were not made by the Terraform module or the CloudFormation stack (by their names): remove\n\
             them from whatever manages them without deleting them, so that it does not undo karpctl's changes.\n",
        ),
    }
    t
}

/// One stack's chained steps. `get-template --output json` keeps a JSON template whole (text
/// output flattens it) and `jq -r .` prints a YAML body as it is.
fn cfn_steps(s: &Stack) -> String {
    let get = "aws cloudformation get-template --stack-name \"$s\" --query TemplateBody --output json | jq -r .";
    let params = if s.parameters.is_empty() {
        String::new()
    } else {
        let p: Vec<String> = s.parameters.iter().map(|p| format!("ParameterKey={p},UsePreviousValue=true")).collect();
        format!(" \\\n      --parameters {}", p.join(" "))
    };
    format!(
        "\n  s={name}\n\
         \x20 {get} > \"$s.template\"\n\
         \x20 # edit $s.template: add `DeletionPolicy: Retain` (JSON: \"DeletionPolicy\": \"Retain\") to every resource, then:\n\
         \x20 aws cloudformation update-stack --stack-name \"$s\" --template-body \"file://$s.template\" \\\n\
         \x20     --capabilities CAPABILITY_NAMED_IAM{params} \\\n\
         \x20   && aws cloudformation wait stack-update-complete --stack-name \"$s\" \\\n\
         \x20   && test \"$({get} | grep -cE 'DeletionPolicy\"?: *\"?Retain')\" \\\n\
         \x20        -ge \"$(aws cloudformation list-stack-resources --stack-name \"$s\" --query 'length(StackResourceSummaries)' --output text)\" \\\n\
         \x20   && aws cloudformation delete-stack --stack-name \"$s\" \\\n\
         \x20   && aws cloudformation wait stack-delete-complete --stack-name \"$s\"\n",
        name = s.name
    )
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
    match &r.diff {
        Ok(diff) => {
            t.push_str(&format!("\nWhat `karpctl up --cluster {} --adopt` will then change:\n\n", r.cluster));
            t.push_str(&super::human::render_plan(&diff.plan, style));
            // An error-level check makes `up --adopt` exit 1 after applying: say so now.
            if let Some(checks) = &diff.readiness {
                t.push_str(&super::human::readiness(checks, style));
            }
        }
        Err(e) => t.push_str(&format!(
            "\n{} `karpctl up --cluster {} --adopt` would refuse the plan as written: {e}\nMend {} (the notes above say what was left out), then run `karpctl diff --cluster {} --adopt`.\n",
            style.red("error:"),
            r.cluster,
            r.path.display(),
            r.cluster
        )),
    }
    t.push('\n');
    t.push_str(&let_go_text(&r.let_go));
    t.push_str(&format!(
        "\nThen: karpctl up --cluster {c} --adopt   ({})\n      karpctl diff --cluster {c}          (exit 0)\n",
        r.diff.as_ref().map(|d| up_adopt_summary(&d.plan)).unwrap_or_else(|_| "once the plan is mended".to_string()),
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
        LetGo::Terraform { module } => json!({"tool": "terraform", "module": module, "state_rm": [module]}),
        LetGo::CloudFormation { stacks } => json!({
            "tool": "cloudformation",
            "stacks": stacks.iter().map(|s| json!({"name": s.name, "parameters": s.parameters})).collect::<Vec<_>>(),
        }),
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
        "up_adopt": r.diff.as_ref().map(super::json::plan_doc).unwrap_or(Value::Null),
        "error": r.diff.as_ref().err(),
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
