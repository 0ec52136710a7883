//! Lane resolution: from the index to the lanes of a namespace and, for each user Service, the
//! lane and baseline Services and EndpointSlices that serve them, with why each subset is what
//! it is.

mod chains;
mod explain;
mod outputs;
mod services;
mod slices;

pub(crate) use chains::mesh_services;
pub use chains::{expiry, lane_plan, LaneDef, LanePlan, Owner, RouteReport, Stamp};
pub use explain::{explain, Explanation, Tier};
pub use outputs::Hashed;
pub(crate) use outputs::Served;
pub(crate) use services::owner_references;
pub use services::{service_output, ServiceOutput};
pub use slices::MAX_ENDPOINTS_PER_SLICE;
