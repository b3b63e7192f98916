//! EKS reads: the cluster (its status memoised by name), add-ons (memoised), access entries,
//! Pod Identity associations, managed node groups and the region's clusters.

use super::memo::Memo;
use crate::aws::{Classify, aws_err};
use crate::model::Tags;
use anyhow::Result;
use aws_sdk_eks::operation::describe_cluster::{DescribeClusterError, DescribeClusterOutput};

/// DescribeCluster's answer as the SDK gives it (callers tell its errors apart themselves).
pub type ClusterAnswer = std::result::Result<
    DescribeClusterOutput,
    aws_smithy_runtime_api::client::result::SdkError<DescribeClusterError, aws_smithy_runtime_api::http::Response>,
>;

/// What DescribeAccessEntry says.
#[derive(Clone, Debug, Default)]
pub struct AccessEntry {
    pub arn: Option<String>,
    pub principal_arn: String,
    /// Its type (`EC2_LINUX`, `STANDARD`, ...), if given.
    pub kind: Option<String>,
    pub created: Option<i64>,
    pub tags: Tags,
}

/// A Pod Identity association as ListPodIdentityAssociations gives it.
#[derive(Clone, Debug, Default)]
pub struct AssociationSummary {
    pub id: String,
    pub namespace: String,
    pub service_account: String,
}

/// What DescribePodIdentityAssociation says.
#[derive(Clone, Debug, Default)]
pub struct Association {
    pub id: Option<String>,
    pub arn: Option<String>,
    pub namespace: Option<String>,
    pub service_account: Option<String>,
    pub role_arn: Option<String>,
    pub target_role_arn: Option<String>,
    pub external_id: Option<String>,
    pub disable_session_tags: Option<bool>,
    pub policy: Option<String>,
    pub owner_arn: Option<String>,
    pub tags: Tags,
}

pub struct Eks {
    client: aws_sdk_eks::Client,
    status: Memo<Option<String>>,
    addons: Memo<Option<String>>,
}

impl Eks {
    pub fn new(client: aws_sdk_eks::Client) -> Eks {
        Eks { client, status: Memo::default(), addons: Memo::default() }
    }

    /// DescribeCluster now, its answer as the SDK gives it.
    pub async fn cluster(&self, name: &str) -> ClusterAnswer {
        self.client.describe_cluster().name(name).send().await
    }

    /// DescribeCluster's status now ("" when EKS gives none; None: no such cluster).
    pub async fn status_now(&self, cluster: &str) -> Result<Option<String>> {
        match self.cluster(cluster).await {
            Ok(o) => Ok(Some(o.cluster().and_then(|c| c.status()).map(|s| s.as_str().to_string()).unwrap_or_default())),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(aws_err("eks:DescribeCluster", e)),
        }
    }

    /// The status read before (`remember_status`), else `status_now`, memoised.
    pub async fn status(&self, cluster: &str) -> Result<Option<String>> {
        self.status.get(cluster, || self.status_now(cluster)).await
    }

    /// Remember a status read elsewhere (prepare's DescribeCluster), so that it costs no call.
    pub fn remember_status(&self, cluster: &str, status: Option<String>) {
        self.status.put(cluster, status);
    }

    /// An add-on's status ("" when EKS gives none), or None when it is not installed. Memoised.
    pub async fn addon_status(&self, cluster: &str, addon: &str) -> Result<Option<String>> {
        self.addons
            .get(&format!("{cluster}:{addon}"), || async {
                match self.client.describe_addon().cluster_name(cluster).addon_name(addon).send().await {
                    Ok(o) => Ok(Some(o.addon().and_then(|a| a.status()).map(|s| s.as_str().to_string()).unwrap_or_default())),
                    Err(e) if e.is_not_found() => Ok(None),
                    Err(e) => Err(aws_err("eks:DescribeAddon", e)),
                }
            })
            .await
    }

    /// DescribeAccessEntry; None when missing (other errors, CONFIG_MAP's included, are errors).
    pub async fn access_entry(&self, cluster: &str, principal: &str) -> Result<Option<AccessEntry>> {
        match self.client.describe_access_entry().cluster_name(cluster).principal_arn(principal).send().await {
            Ok(o) => Ok(o.access_entry().map(|e| AccessEntry {
                arn: e.access_entry_arn().map(str::to_string),
                principal_arn: e.principal_arn().unwrap_or_default().to_string(),
                kind: e.r#type().map(str::to_string),
                created: e.created_at().map(|t| t.secs()),
                tags: e.tags().map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect()).unwrap_or_default(),
            })),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(aws_err("eks:DescribeAccessEntry", e)),
        }
    }

    /// The principals of the cluster's access entries (ListAccessEntries, paginated).
    pub async fn access_entries(&self, cluster: &str) -> Result<Vec<String>> {
        let req = self.client.list_access_entries().cluster_name(cluster);
        req.into_paginator().items().send().try_collect().await.map_err(|e| aws_err("eks:ListAccessEntries", e))
    }

    /// The cluster's Pod Identity associations (ListPodIdentityAssociations, paginated), of one
    /// service account (`Some((namespace, service account))`) or all.
    pub async fn associations(&self, cluster: &str, of: Option<(&str, &str)>) -> Result<Vec<AssociationSummary>> {
        let req = self
            .client
            .list_pod_identity_associations()
            .cluster_name(cluster)
            .set_namespace(of.map(|o| o.0.to_string()))
            .set_service_account(of.map(|o| o.1.to_string()));
        let items: Vec<_> =
            req.into_paginator().items().send().try_collect().await.map_err(|e| aws_err("eks:ListPodIdentityAssociations", e))?;
        Ok(items
            .iter()
            .map(|a| AssociationSummary {
                id: a.association_id().unwrap_or_default().to_string(),
                namespace: a.namespace().unwrap_or_default().to_string(),
                service_account: a.service_account().unwrap_or_default().to_string(),
            })
            .collect())
    }

    /// DescribePodIdentityAssociation; None when missing.
    pub async fn association(&self, cluster: &str, id: &str) -> Result<Option<Association>> {
        match self.client.describe_pod_identity_association().cluster_name(cluster).association_id(id).send().await {
            Ok(o) => Ok(o.association().map(|a| Association {
                id: a.association_id().map(str::to_string),
                arn: a.association_arn().map(str::to_string),
                namespace: a.namespace().map(str::to_string),
                service_account: a.service_account().map(str::to_string),
                role_arn: a.role_arn().map(str::to_string),
                target_role_arn: a.target_role_arn().map(str::to_string),
                external_id: a.external_id().map(str::to_string),
                disable_session_tags: a.disable_session_tags(),
                policy: a.policy().map(str::to_string),
                owner_arn: a.owner_arn().map(str::to_string),
                tags: a.tags().map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect()).unwrap_or_default(),
            })),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(aws_err("eks:DescribePodIdentityAssociation", e)),
        }
    }

    /// The names of the cluster's managed node groups (ListNodegroups, paginated).
    pub async fn nodegroups(&self, cluster: &str) -> Result<Vec<String>> {
        let req = self.client.list_nodegroups().cluster_name(cluster);
        req.into_paginator().items().send().try_collect().await.map_err(|e| aws_err("eks:ListNodegroups", e))
    }

    /// A managed node group's node role ARN (DescribeNodegroup); None when the group is missing.
    pub async fn nodegroup_role(&self, cluster: &str, group: &str) -> Result<Option<String>> {
        match self.client.describe_nodegroup().cluster_name(cluster).nodegroup_name(group).send().await {
            Ok(o) => Ok(o.nodegroup().and_then(|n| n.node_role()).map(str::to_string)),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(aws_err("eks:DescribeNodegroup", e)),
        }
    }

    /// The region's EKS clusters (ListClusters, paginated).
    pub async fn clusters(&self) -> Result<Vec<String>> {
        self.client
            .list_clusters()
            .into_paginator()
            .items()
            .send()
            .try_collect()
            .await
            .map_err(|e| aws_err("eks:ListClusters", e))
    }
}
