//! LaneEntries: the HTTPRoutes that let requests into lanes (by header, lane link, cookie or
//! preview hostname), built from the Services resolved for the namespace.

mod claims;
mod context;
mod entry;
mod links;
mod route_parts;
mod routes;

pub(crate) use claims::has_previews;
pub use context::EntryReport;
pub use entry::{outputs, probe};
