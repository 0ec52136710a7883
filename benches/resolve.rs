//! Lane resolution at scale: 10,000 pods, 1,000 services, 50 lanes in one namespace.

#[path = "../tests/fixtures/mod.rs"]
mod fixtures;

/// The allocator the operator runs with.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion};
use fixtures::*;
use laneway::lanes::{Config, Index};

const SERVICES: usize = 1_000;
const PODS_PER_SERVICE: usize = 10;
const LANES: usize = 50;
const SERVICES_PER_LANE: usize = 100;

fn world() -> World {
    let mut pods = Vec::with_capacity(SERVICES * PODS_PER_SERVICE);
    for s in 0..SERVICES {
        for i in 0..PODS_PER_SERVICE {
            let n = s * PODS_PER_SERVICE + i;
            // Two of every ten pods are in a lane; the rest are baseline.
            let lane = (i < 2).then(|| format!("lane-{}", (s + i) % LANES));
            let ip = format!("10.{}.{}.{}", n / 65_536, (n / 256) % 256, n % 256);
            pods.push(pod(&format!("s{s}-{i}"), &format!("s{s}"), lane.as_deref(), &ip));
        }
    }
    let services = (0..SERVICES).map(|s| service(&format!("s{s}"))).collect();
    let routes = (0..LANES)
        .map(|l| {
            let names: Vec<String> = (0..SERVICES_PER_LANE)
                .map(|k| format!("s{}", (l * 20 + k) % SERVICES))
                .collect();
            let names: Vec<&str> = names.iter().map(String::as_str).collect();
            let fallback = format!("lane-{}", (l + 1) % LANES);
            route(&format!("lane-{l}"), &names, &[fallback.as_str()], l % 10 == 0)
        })
        .collect();
    let rules = (0..10)
        .map(|s| {
            tag_rule(
                &format!("rule-s{s}"),
                &format!("s{s}"),
                &[("gray", &[("version", "v2")])],
                Some(&format!("s{s}-app")),
            )
        })
        .collect();
    World {
        pods,
        services,
        routes,
        rules,
    }
}

fn bench(c: &mut Criterion) {
    let w = world();
    let idx = w.index();
    let d = idx.desired(NS, now());
    eprintln!(
        "world: {} pods, {} services, {} lanes -> {} Services, {} EndpointSlices",
        w.pods.len(),
        w.services.len(),
        w.routes.len(),
        d.services.len(),
        d.slices.len()
    );
    let mut g = c.benchmark_group("resolve_10k_pods");
    g.sample_size(10);
    // From the objects as the watches hold them. The operator frees a replaced result off
    // its path, and keeps its index: neither is dropped inside the timing.
    g.bench_function("full: index + all outputs + dubbo rules", |b| {
        b.iter_batched(
            || {
                (
                    w.pods.clone(),
                    w.services.clone(),
                    w.routes.clone(),
                    w.rules.clone(),
                )
            },
            |(pods, services, routes, rules)| {
                let idx = Index::from_objects(Config::default(), pods, services, routes, rules);
                let d = idx.desired(NS, now());
                let rules = idx.tag_rules(now());
                (idx, d, rules)
            },
            BatchSize::LargeInput,
        )
    });
    g.bench_function("all outputs from a built index", |b| {
        b.iter_with_large_drop(|| idx.desired(NS, now()))
    });
    let moved = with_label(w.pods[5].clone(), "laneway.io/lane", "lane-7");
    g.bench_function("one pod changes: refresh of the affected services", |b| {
        b.iter_batched_ref(
            || (idx.clone(), d.clone()),
            |(idx, d)| {
                let affected = idx.apply(moved.clone());
                idx.refresh(d, NS, &affected.services, now());
            },
            BatchSize::LargeInput,
        )
    });
    g.bench_function("one pod changes: whole namespace", |b| {
        b.iter_batched_ref(
            || idx.clone(),
            |idx| {
                idx.apply(moved.clone());
                idx.desired(NS, now())
            },
            BatchSize::LargeInput,
        )
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
