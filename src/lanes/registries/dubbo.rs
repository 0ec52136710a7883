//! Dubbo tag-router rules built from the same subsets as the Kubernetes outputs.
//!
//! Dubbo's own fallback already sends a tagged call with no tagged provider to untagged
//! providers, so baseline pods are never listed; an untagged pod listed under a tag would
//! be lost to untagged traffic.
//!
//! Dubbo knows nothing of readiness: a tagged pod that is not ready is listed under
//! [`NOT_READY_TAG`] instead of its lanes, so that its lane's calls go to the next tier while
//! untagged calls still never reach it.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use super::governed::RuleInputs;
use crate::api::DubboSpec;
use crate::lanes::naming;
use crate::lanes::problem::Problem;
use crate::lanes::resolution::LanePlan;

/// The tag that holds tagged pods which are not ready. A `/` is not allowed in a lane name (a
/// label value), so no lane can be called this.
pub const NOT_READY_TAG: &str = "laneway.io/not-ready";

/// A rendered tag-router rule for one Dubbo application.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DubboRule {
    pub application: String,
    /// `<application>.tag-router`: the ZooKeeper node name, Nacos dataId and ConfigMap key.
    pub key: String,
    /// The YAML document.
    pub content: String,
    /// Lowercase hex SHA-256 of `content`.
    pub content_hash: String,
}

impl DubboRule {
    pub fn new(application: &str, force: bool, tags: &[(String, Vec<String>)]) -> Self {
        let content = render(application, force, tags);
        DubboRule {
            application: application.to_owned(),
            key: rule_key(application),
            content_hash: naming::digest(&[&content]),
            content,
        }
    }

    /// The document that switches routing off before a rule is deleted (running dubbo-go
    /// consumers do not notice deletions).
    pub fn disabled(application: &str) -> Self {
        let content = format!(
            "configVersion: v3.0\nkey: {}\nforce: false\nenabled: false\nruntime: true\ntags: []\n",
            scalar(application)
        );
        DubboRule {
            application: application.to_owned(),
            key: rule_key(application),
            content_hash: naming::digest(&[&content]),
            content,
        }
    }
}

fn rule_key(application: &str) -> String {
    format!("{application}.tag-router")
}

/// Renders a tag-router rule; with no tag it is published disabled (a rule without tags is
/// invalid for Dubbo).
fn render(application: &str, force: bool, tags: &[(String, Vec<String>)]) -> String {
    let mut out = format!(
        "configVersion: v3.0\nkey: {}\nforce: {force}\nenabled: {}\nruntime: true\n",
        scalar(application),
        !tags.is_empty()
    );
    if tags.is_empty() {
        out.push_str("tags: []\n");
        return out;
    }
    out.push_str("tags:\n");
    for (name, addresses) in tags {
        let quoted: Vec<String> = addresses.iter().map(|a| format!("\"{a}\"")).collect();
        out.push_str(&format!(
            "  - name: {}\n    addresses: [{}]\n",
            scalar(name),
            quoted.join(", ")
        ));
    }
    out
}

/// A YAML plain scalar, quoted where a YAML 1.1 parser (SnakeYAML) would read it as
/// something other than a string.
fn scalar(s: &str) -> String {
    const SPECIAL: [&str; 12] = [
        "y", "n", "yes", "no", "true", "false", "on", "off", "null", "~", ".inf", ".nan",
    ];
    let lower = s.to_ascii_lowercase();
    let numeric = s.starts_with(|c: char| c.is_ascii_digit() || c == '.' || c == '+' || c == '-');
    if s.is_empty() || numeric || SPECIAL.contains(&lower.as_str()) {
        format!("\"{s}\"")
    } else {
        s.to_owned()
    }
}

fn address(ip: &str, port: i32) -> String {
    match ip.parse::<IpAddr>() {
        Ok(IpAddr::V6(_)) => format!("[{ip}]:{port}"),
        _ => format!("{ip}:{port}"),
    }
}

fn sort_addresses(addresses: &mut Vec<String>) {
    let key = |a: &String| {
        let (host, port) = a.rsplit_once(':').unwrap_or((a.as_str(), "0"));
        let ip = host.trim_matches(|c| c == '[' || c == ']').parse::<IpAddr>().ok();
        (ip, port.parse::<u32>().unwrap_or(0), a.clone())
    };
    addresses.sort_by_key(key);
    addresses.dedup();
}

/// The rule's tags with their addresses: each lane lists its ready pods, or those of its first
/// fallback lane with a ready pod; tagged pods that are not ready go under [`NOT_READY_TAG`].
pub(super) fn dubbo_tags(
    rule: &RuleInputs,
    dubbo: &DubboSpec,
    plan: &LanePlan,
    problems: &mut Vec<Problem>,
) -> Vec<(String, Vec<String>)> {
    let (addresses, mut not_ready) = pod_addresses(rule, dubbo, problems);
    let ready_tags: BTreeSet<&str> = rule
        .governed
        .iter()
        .filter(|p| p.info.is_ready())
        .flat_map(|p| p.tags.iter().map(|(t, _)| t.as_str()))
        .collect();
    let ready = rule.governed.iter().copied().filter(|p| p.info.is_ready());
    let lanes = rule.lanes(plan, ready);
    let mut tags = Vec::new();
    for lane in lanes {
        let mut listed = addresses.get(lane).cloned().unwrap_or_default();
        if !ready_tags.contains(lane) {
            if let Some(fallback) = plan.chain(lane).iter().find(|f| ready_tags.contains(f.as_str())) {
                listed.extend(addresses.get(fallback.as_str()).cloned().unwrap_or_default());
            }
        }
        sort_addresses(&mut listed);
        if !listed.is_empty() {
            tags.push((lane.to_owned(), listed));
        }
    }
    if !not_ready.is_empty() {
        sort_addresses(&mut not_ready);
        tags.push((NOT_READY_TAG.to_owned(), not_ready));
    }
    tags
}

/// The `ip:port` of every governed pod: the ready ones under each of their tags, the tagged ones
/// that are not ready apart. A pod without the named Dubbo port is reported and left out.
fn pod_addresses<'a>(
    rule: &RuleInputs<'a>,
    dubbo: &DubboSpec,
    problems: &mut Vec<Problem>,
) -> (BTreeMap<&'a str, Vec<String>>, Vec<String>) {
    let mut addresses: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    let mut not_ready = Vec::new();
    for p in rule.governed {
        let port = p
            .info
            .tcp_port(dubbo.port, dubbo.port_name.as_deref())
            .unwrap_or_else(|name| {
                problems.push(Problem::DubboPortMissing {
                    rule: rule.key.clone(),
                    port: name.to_owned(),
                    pod: p.info.name.clone(),
                });
                None
            });
        let Some((port, ip)) = port.zip(p.info.ips.first()) else {
            continue;
        };
        if p.info.is_ready() {
            for (tag, _) in &p.tags {
                addresses.entry(tag.as_str()).or_default().push(address(ip, port));
            }
        } else if !p.tags.is_empty() {
            not_ready.push(address(ip, port));
        }
    }
    (addresses, not_ready)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_the_reference_document() {
        let rule = DubboRule::new(
            "order-service",
            false,
            &[(
                "gray".into(),
                vec!["10.0.1.7:20880".into(), "10.0.1.9:20880".into()],
            )],
        );
        assert_eq!(
            rule.content,
            "configVersion: v3.0\nkey: order-service\nforce: false\nenabled: true\nruntime: true\ntags:\n  - name: gray\n    addresses: [\"10.0.1.7:20880\", \"10.0.1.9:20880\"]\n"
        );
        assert_eq!(rule.key, "order-service.tag-router");
        assert_eq!(rule.content_hash.len(), 64);
    }

    #[test]
    fn no_tags_publishes_a_disabled_rule() {
        let rule = DubboRule::new("pay", true, &[]);
        assert!(rule.content.contains("enabled: false\n"), "{}", rule.content);
        assert!(rule.content.ends_with("tags: []\n"));
        assert_eq!(
            DubboRule::disabled("pay").content,
            DubboRule::new("pay", false, &[]).content
        );
    }

    #[test]
    fn ambiguous_scalars_are_quoted() {
        assert_eq!(scalar("gray"), "gray");
        assert_eq!(scalar("true"), "\"true\"");
        assert_eq!(scalar("No"), "\"No\"");
        assert_eq!(scalar("1.5"), "\"1.5\"");
        assert_eq!(scalar("007"), "\"007\"");
    }

    #[test]
    fn addresses_sort_numerically_and_ipv6_is_bracketed() {
        let mut a = vec![
            "10.0.0.10:20880".to_string(),
            "10.0.0.9:20880".into(),
            "10.0.0.9:20880".into(),
        ];
        sort_addresses(&mut a);
        assert_eq!(a, ["10.0.0.9:20880", "10.0.0.10:20880"]);
        assert_eq!(address("fd00::1", 20880), "[fd00::1]:20880");
    }
}
