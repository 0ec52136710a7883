//! What a probe's hop records say: for each hop, the lane it carried and the tier laneway
//! expected there, and the first hop where the lane was lost, the tier differs, or the chain
//! stopped short of an expected service. Pure: the records and the LaneRoute's status in, a
//! verdict out.

use serde::{Deserialize, Serialize};

use crate::api::SubsetSource;

/// One hop's record, as the Java libraries answer a probed request with it.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
pub struct Hop {
    /// The application that served it, when the integration knows its name.
    #[serde(default)]
    pub app: Option<String>,
    #[serde(default)]
    pub pod: Option<String>,
    /// The lane the hop carried on (the request's, else the pod's own); `None`: no lane.
    #[serde(default)]
    pub lane: Option<String>,
    /// How the hop learnt it: `header`, `baggage`, `tag` (Dubbo), `own` (the pod's own lane) or
    /// `none`.
    #[serde(default)]
    pub learnt: String,
    /// The pod's own lane: its lane label as the cluster shows it, where the pod is found there
    /// (else as the hop reported it); `None`: a baseline pod.
    #[serde(default)]
    pub own: Option<String>,
    /// The lane's service this pod belongs to (filled in from the cluster, not by the hop).
    #[serde(default)]
    pub service: Option<String>,
}

/// What laneway resolved for one service of the lane (its LaneRoute's status).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Expected {
    pub service: String,
    /// `None`: a service the user expects that the LaneRoute does not list.
    pub source: Option<SubsetSource>,
}

/// The first thing that went wrong along the chain.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase", tag = "kind")]
pub enum Finding {
    /// Every hop carried the lane, each on the tier laneway expected, and every expected
    /// service was reached.
    Clean,
    /// Hop `at` carried no lane, or another one; `from` is the hop that called it.
    LaneLost { at: usize, from: Option<usize> },
    /// Hop `at` is a pod of another tier than laneway expected for the lane there.
    TierDiffers { at: usize },
    /// `service` never reported: the chain stopped after hop `after` (or before the first hop).
    NotReached { after: Option<usize>, service: String },
}

/// A probe's result: the hops in the order they were reached, and the finding.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct Verdict {
    pub lane: String,
    pub hops: Vec<Hop>,
    /// Per hop, the tier laneway expected there (`Lane`, `Fallback:<lane>`, `Baseline`,
    /// `Empty`), if its service is one of the lane's.
    pub expected: Vec<Option<String>>,
    pub finding: Finding,
}

impl Verdict {
    pub fn is_clean(&self) -> bool {
        self.finding == Finding::Clean
    }
}

/// Judges `hops` of a probe in `lane` against what laneway expected at each service.
pub fn judge(lane: &str, expected: &[Expected], hops: Vec<Hop>) -> Verdict {
    let source_of = |hop: &Hop| {
        let service = hop.service.as_deref()?;
        expected
            .iter()
            .find(|e| e.service == service)
            .and_then(|e| e.source.clone())
    };
    let sources: Vec<Option<SubsetSource>> = hops.iter().map(source_of).collect();
    let first_fault = hops
        .iter()
        .zip(&sources)
        .enumerate()
        .find_map(|(i, (hop, source))| {
            if hop.lane.as_deref() != Some(lane) {
                Some(Finding::LaneLost {
                    at: i,
                    from: i.checked_sub(1),
                })
            } else if source.as_ref().is_some_and(|s| !on_tier(hop, s, lane)) {
                Some(Finding::TierDiffers { at: i })
            } else {
                None
            }
        });
    let missing = || {
        let reached = |e: &&Expected| hops.iter().any(|h| h.service.as_deref() == Some(&e.service));
        let service = expected.iter().find(|e| !reached(e))?.service.clone();
        Some(Finding::NotReached {
            after: hops.len().checked_sub(1),
            service,
        })
    };
    let finding = first_fault.or_else(missing).unwrap_or(Finding::Clean);
    Verdict {
        lane: lane.to_owned(),
        expected: sources
            .iter()
            .map(|s| s.as_ref().map(|s| s.to_string()))
            .collect(),
        hops,
        finding,
    }
}

/// Whether the hop's pod belongs to the tier `source` names for `lane`.
fn on_tier(hop: &Hop, source: &SubsetSource, lane: &str) -> bool {
    match source {
        SubsetSource::Lane => hop.own.as_deref() == Some(lane),
        SubsetSource::Fallback(lane) => hop.own.as_deref() == Some(lane),
        SubsetSource::Baseline => hop.own.is_none(),
        SubsetSource::Empty => false,
    }
}

fn or_dash(value: Option<&str>) -> &str {
    value.unwrap_or("-")
}

fn hop_name(hop: &Hop) -> String {
    format!(
        "{} (pod {})",
        or_dash(hop.service.as_deref().or(hop.app.as_deref())),
        or_dash(hop.pod.as_deref())
    )
}

/// The verdict as a table of hops and a sentence naming the first fault.
pub fn render(v: &Verdict) -> String {
    let mut rows = vec![[
        "HOP",
        "SERVICE",
        "POD",
        "LANE",
        "LEARNT",
        "EXPECTED",
        "POD'S LANE",
    ]
    .map(String::from)
    .to_vec()];
    for (i, (hop, expected)) in v.hops.iter().zip(&v.expected).enumerate() {
        rows.push(vec![
            (i + 1).to_string(),
            or_dash(hop.service.as_deref().or(hop.app.as_deref())).to_owned(),
            or_dash(hop.pod.as_deref()).to_owned(),
            or_dash(hop.lane.as_deref()).to_owned(),
            hop.learnt.clone(),
            or_dash(expected.as_deref()).to_owned(),
            or_dash(hop.own.as_deref()).to_owned(),
        ]);
    }
    let mut out = crate::explain::table(&rows);
    out.push_str(&finding_line(v));
    out.push('\n');
    out
}

fn finding_line(v: &Verdict) -> String {
    let lane = &v.lane;
    match &v.finding {
        Finding::Clean => {
            format!("clean: every hop carried lane {lane}, each on the tier laneway expected")
        }
        Finding::LaneLost { at, from } => {
            let hop = &v.hops[*at];
            let carried = hop
                .lane
                .as_ref()
                .map_or("no lane".to_owned(), |l| format!("lane {l}"));
            let from = from.map_or("the entry".to_owned(), |f| hop_name(&v.hops[f]));
            format!(
                "lane {lane} lost at hop {}: {} got {carried} from {from}",
                at + 1,
                hop_name(hop)
            )
        }
        Finding::TierDiffers { at } => format!(
            "tier differs at hop {}: {} is not on the tier laneway expected ({})",
            at + 1,
            hop_name(&v.hops[*at]),
            or_dash(v.expected[*at].as_deref())
        ),
        Finding::NotReached { after, service } => match after {
            Some(after) => format!(
                "lane {lane} never reached {service}: the last hop to report was hop {} {}, whose onward call carried no probe",
                after + 1,
                hop_name(&v.hops[*after])
            ),
            None => format!("lane {lane} never reached {service}: no hop reported"),
        },
    }
}
