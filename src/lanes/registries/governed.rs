//! One TagRule and the pods it governs: what its Dubbo rule and its Nacos marks are built from.

use std::collections::BTreeSet;

use crate::lanes::index::{CompiledRule, PodEntry};
use crate::lanes::problem::ObjectKey;
use crate::lanes::resolution::LanePlan;

/// One TagRule and the pods it governs.
pub(super) struct RuleInputs<'a> {
    pub key: &'a ObjectKey,
    pub compiled: &'a CompiledRule,
    pub governed: &'a [&'a PodEntry],
}

impl<'a> RuleInputs<'a> {
    /// The lanes a tagged call may ask for at this rule's instances: the tags `ready` pods
    /// carry, every lane of the namespace and the rule's own tags.
    pub fn lanes(&self, plan: &'a LanePlan, ready: impl Iterator<Item = &'a PodEntry>) -> BTreeSet<&'a str> {
        ready
            .flat_map(|p| p.tags.iter().map(|(t, _)| t.as_str()))
            .chain(plan.lanes.keys().map(String::as_str))
            .chain(self.compiled.rule.spec.tags.iter().map(|t| t.name.as_str()))
            .collect()
    }
}
