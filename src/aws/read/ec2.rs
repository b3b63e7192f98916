//! EC2 reads: subnets and security groups by filter, a VPC's route tables and endpoints, whether
//! a VPC exists, and the discovery tags of a batch of objects (memoised by batch).

use super::memo::Memo;
use crate::aws::aws_err;
use crate::egress;
use crate::model::Tags;
use crate::tags::{DISCOVERY_TAG, MARKER_TAG};
use anyhow::Result;
use aws_sdk_ec2::types::{Filter, IpPermission};
use std::collections::BTreeMap;
use std::sync::Arc;

/// Resource ids per DescribeTags call (the filter takes a list of values; keep it modest).
const IDS_PER_CALL: usize = 100;

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Subnet {
    pub id: String,
    pub az: String,
    pub free: i64,
    pub vpc_id: String,
    pub tags: Tags,
    /// `MapPublicIpOnLaunch`: instances launched here get a public IPv4 address.
    pub map_public_ip: bool,
    /// `EnableDns64`: the resolver gives IPv4-only names addresses in NAT64's prefix.
    pub dns64: bool,
    /// The account that owns it (in a VPC shared through AWS RAM, the VPC owner's).
    pub owner_id: String,
}

/// A security group as DescribeSecurityGroups gives it (its rules as EC2 writes them).
#[derive(Clone, Debug, Default)]
pub struct SecurityGroup {
    pub id: String,
    pub name: String,
    pub description: String,
    pub vpc_id: String,
    pub tags: Tags,
    pub ingress: Vec<IpPermission>,
    pub egress: Vec<IpPermission>,
}

pub fn filter(name: &str, values: Vec<String>) -> Filter {
    Filter::builder().name(name).set_values(Some(values)).build()
}

fn ec2_tags(t: &[aws_sdk_ec2::types::Tag]) -> Tags {
    t.iter().filter_map(|t| Some((t.key()?.to_string(), t.value().unwrap_or_default().to_string()))).collect()
}

pub struct Ec2 {
    client: aws_sdk_ec2::Client,
    discovery_tags: Memo<Arc<BTreeMap<String, Tags>>>,
}

impl Ec2 {
    pub fn new(client: aws_sdk_ec2::Client) -> Ec2 {
        Ec2 { client, discovery_tags: Memo::default() }
    }

    /// The subnets matching the filters (DescribeSubnets, paginated).
    pub async fn subnets(&self, filters: Vec<Filter>) -> Result<Vec<Subnet>> {
        let req = self.client.describe_subnets().set_filters(Some(filters));
        let subnets: Vec<_> =
            req.into_paginator().items().send().try_collect().await.map_err(|e| aws_err("ec2:DescribeSubnets", e))?;
        Ok(subnets
            .iter()
            .map(|s| Subnet {
                id: s.subnet_id().unwrap_or_default().to_string(),
                az: s.availability_zone().unwrap_or_default().to_string(),
                free: s.available_ip_address_count().map(i64::from).unwrap_or(0),
                vpc_id: s.vpc_id().unwrap_or_default().to_string(),
                tags: ec2_tags(s.tags()),
                map_public_ip: s.map_public_ip_on_launch().unwrap_or(false),
                dns64: s.enable_dns64().unwrap_or(false),
                owner_id: s.owner_id().unwrap_or_default().to_string(),
            })
            .collect())
    }

    /// The security groups matching the filters (DescribeSecurityGroups, paginated).
    pub async fn security_groups(&self, filters: Vec<Filter>) -> Result<Vec<SecurityGroup>> {
        let req = self.client.describe_security_groups().set_filters(Some(filters));
        let groups: Vec<_> =
            req.into_paginator().items().send().try_collect().await.map_err(|e| aws_err("ec2:DescribeSecurityGroups", e))?;
        Ok(groups
            .iter()
            .map(|g| SecurityGroup {
                id: g.group_id().unwrap_or_default().to_string(),
                name: g.group_name().unwrap_or_default().to_string(),
                description: g.description().unwrap_or_default().to_string(),
                vpc_id: g.vpc_id().unwrap_or_default().to_string(),
                tags: ec2_tags(g.tags()),
                ingress: g.ip_permissions().to_vec(),
                egress: g.ip_permissions_egress().to_vec(),
            })
            .collect())
    }

    /// Whether EC2 knows the VPC (DescribeVpcs, one call).
    pub async fn vpc_exists(&self, vpc: &str) -> Result<bool> {
        let o = self
            .client
            .describe_vpcs()
            .filters(filter("vpc-id", vec![vpc.to_string()]))
            .send()
            .await
            .map_err(|e| aws_err("ec2:DescribeVpcs", e))?;
        Ok(o.vpcs().iter().any(|v| v.vpc_id() == Some(vpc)))
    }

    /// The VPC's route tables, with only what the way-out check needs: the default routes and
    /// NAT64's route.
    pub async fn route_tables(&self, vpc: &str) -> Result<Vec<egress::RouteTable>> {
        let req = self.client.describe_route_tables().filters(filter("vpc-id", vec![vpc.to_string()]));
        let tables: Vec<_> =
            req.into_paginator().items().send().try_collect().await.map_err(|e| aws_err("ec2:DescribeRouteTables", e))?;
        Ok(tables
            .iter()
            .filter(|t| t.vpc_id().is_none_or(|v| v == vpc))
            .map(|t| egress::RouteTable {
                id: t.route_table_id().unwrap_or_default().to_string(),
                main: t.associations().iter().any(|a| a.main() == Some(true)),
                subnets: t.associations().iter().filter_map(|a| a.subnet_id()).map(str::to_string).collect(),
                default_routes: t
                    .routes()
                    .iter()
                    .filter(|r| {
                        r.destination_cidr_block() == Some("0.0.0.0/0")
                            || matches!(r.destination_ipv6_cidr_block(), Some("::/0" | egress::NAT64_PREFIX))
                    })
                    .map(|r| egress::DefaultRoute {
                        gateway_id: r.gateway_id().map(str::to_string),
                        other_target: r
                            .nat_gateway_id()
                            .or(r.transit_gateway_id())
                            .or(r.network_interface_id())
                            .or(r.instance_id())
                            .or(r.vpc_peering_connection_id())
                            .or(r.egress_only_internet_gateway_id())
                            .or(r.local_gateway_id())
                            .or(r.carrier_gateway_id())
                            .or(r.core_network_arn())
                            .map(str::to_string),
                        blackhole: r.state().is_some_and(|s| s.as_str() == "blackhole"),
                        ipv6: r.destination_ipv6_cidr_block() == Some("::/0"),
                        nat64: r.destination_ipv6_cidr_block() == Some(egress::NAT64_PREFIX),
                    })
                    .collect(),
            })
            .collect())
    }

    /// The VPC's endpoints that are (or are becoming) usable.
    pub async fn vpc_endpoints(&self, vpc: &str) -> Result<Vec<egress::Endpoint>> {
        let req = self.client.describe_vpc_endpoints().filters(filter("vpc-id", vec![vpc.to_string()]));
        let eps: Vec<_> =
            req.into_paginator().items().send().try_collect().await.map_err(|e| aws_err("ec2:DescribeVpcEndpoints", e))?;
        Ok(eps
            .iter()
            .filter(|e| e.vpc_id().is_none_or(|v| v == vpc))
            .filter(|e| {
                !matches!(
                    e.state().map(|s| s.as_str().to_ascii_lowercase()).as_deref(),
                    Some("deleted" | "deleting" | "failed" | "rejected" | "expired")
                )
            })
            .map(|e| egress::Endpoint {
                id: e.vpc_endpoint_id().unwrap_or_default().to_string(),
                service_name: e.service_name().unwrap_or_default().to_string(),
                kind: e.vpc_endpoint_type().map(|t| t.as_str().to_string()).unwrap_or_default(),
                private_dns: e.private_dns_enabled(),
                route_tables: e.route_table_ids().to_vec(),
            })
            .collect())
    }

    /// The discovery and marker tags of every id, now: one DescribeTags per `IDS_PER_CALL` ids
    /// (paginated). Ids without either tag are absent.
    pub async fn discovery_tags_now(&self, ids: &[String]) -> Result<BTreeMap<String, Tags>> {
        let mut out: BTreeMap<String, Tags> = BTreeMap::new();
        for chunk in ids.chunks(IDS_PER_CALL) {
            let mut token = None;
            loop {
                let o = self
                    .client
                    .describe_tags()
                    .filters(filter("resource-id", chunk.to_vec()))
                    .filters(filter("key", vec![DISCOVERY_TAG.into(), MARKER_TAG.into()]))
                    .set_next_token(token)
                    .send()
                    .await
                    .map_err(|e| aws_err("ec2:DescribeTags", e))?;
                for t in o.tags() {
                    let (Some(id), Some(k)) = (t.resource_id(), t.key()) else { continue };
                    // Checked again here: not every implementation applies every filter.
                    if chunk.iter().any(|c| c == id) && (k == DISCOVERY_TAG || k == MARKER_TAG) {
                        out.entry(id.to_string()).or_default().insert(k.to_string(), t.value().unwrap_or_default().to_string());
                    }
                }
                token = o.next_token().filter(|t| !t.is_empty()).map(str::to_string);
                if token.is_none() {
                    break;
                }
            }
        }
        Ok(out)
    }

    /// `discovery_tags_now`, memoised for the observation by the whole batch of ids.
    pub async fn discovery_tags(&self, ids: &[String]) -> Result<Arc<BTreeMap<String, Tags>>> {
        self.discovery_tags.get(&ids.join(","), || async { self.discovery_tags_now(ids).await.map(Arc::new) }).await
    }
}
