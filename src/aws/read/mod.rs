//! Every AWS read (Get/List/Describe) karpctl makes, one reader per service, each owning its
//! client and the typed memos a run shares. Reads only: the kinds (`resources`) write.
//! Errors are `aws_err`'s; `None` is "no such object" where a read says so.

pub mod cloudtrail;
pub mod cloudwatch;
pub mod ec2;
pub mod eks;
pub mod events;
pub mod iam;
pub mod kms;
pub mod memo;
pub mod quotas;
pub mod simulate;
pub mod sqs;
pub mod sts;

use crate::aws::Clients;

/// The readers of one account and region (built from its clients; one per run and cluster).
pub struct Readers {
    pub iam: iam::Iam,
    pub ec2: ec2::Ec2,
    pub eks: eks::Eks,
    pub sqs: sqs::Sqs,
    pub events: events::Events,
    pub kms: kms::Kms,
    pub sts: sts::Sts,
    /// CloudTrail: what the running Karpenter did (`running`, #36).
    pub trail: cloudtrail::Trails,
    /// CloudWatch metrics of the interruption rules and queue (doctor).
    pub metrics: cloudwatch::CloudWatch,
    /// The IAM policy simulator (doctor `--simulate`).
    pub simulator: simulate::Simulator,
    /// Service Quotas: the vCPU quotas a fleet's launches hit.
    pub quotas: quotas::Quotas,
}

impl Readers {
    pub fn new(c: &Clients) -> Readers {
        Readers {
            iam: iam::Iam::new(c.iam.clone()),
            ec2: ec2::Ec2::new(c.ec2.clone()),
            eks: eks::Eks::new(c.eks.clone()),
            sqs: sqs::Sqs::new(c.sqs.clone()),
            events: events::Events::new(c.events.clone()),
            kms: kms::Kms::new(c.kms.clone()),
            sts: sts::Sts::new(c.sts.clone()),
            trail: cloudtrail::Trails::new(c.cloudtrail.clone(), c.region.clone()),
            metrics: cloudwatch::CloudWatch::new(c.cloudwatch.clone()),
            simulator: simulate::Simulator::new(c.iam.clone()),
            quotas: quotas::Quotas::new(c.servicequotas.clone()),
        }
    }
}

/// Whether an error a reader returned is AWS's "no such object".
pub fn is_not_found(e: &anyhow::Error) -> bool {
    use crate::aws::Classify;
    crate::aws::aws_error_in(e).is_some_and(|a| a.is_not_found())
}
