//! The service registries laneway publishes lanes to: Dubbo tag-router rules and Nacos instance
//! marks, both built from the pods each TagRule governs and the namespace's lanes.

mod dubbo;
mod entry;
mod governed;
mod messages;
mod nacos;
mod reports;

pub use dubbo::{DubboRule, NOT_READY_TAG};
pub use entry::{entry_key, EntryLane, EntryRules, ENTRY_SUFFIX};
pub use messages::{
    messages_key, Epoch, MessageOwners, MessageRules, Owners, MESSAGES_SUFFIX, MESSAGE_GRACE_MS,
    MESSAGE_RETAIN_MS,
};
pub use nacos::{InstanceAddr, MarkTarget, Marks, NacosMarks};
pub use reports::{tag_rules, TagRuleReport, TagRules};
