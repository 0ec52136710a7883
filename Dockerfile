# syntax=docker/dockerfile:1
# The laneway operator image: built with exactly the cargo command CI runs, shipped on distroless
# (glibc + CA certificates, no shell, no package manager), running as the non-root user 65532.
#   docker build -t laneway:0.1.0 .
# The Helm chart (charts/laneway) runs it with a read-only root filesystem.

FROM rust:1.95-bookworm AS build
WORKDIR /src
# Only what `cargo build --bin laneway` reads (see .dockerignore for what stays out).
COPY Cargo.toml Cargo.lock ./
COPY src ./src
# Cargo checks that every declared target exists, [[bench]] resolve included.
COPY benches ./benches
# The registry and target dir are BuildKit caches, so a rebuild only compiles what changed; the
# binary is copied out of the cache mount into the image layer.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --bin laneway \
 && install -D -m 0755 target/release/laneway /out/laneway

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /out/laneway /laneway
# 65532 is distroless' "nonroot"; numeric, so runAsNonRoot can verify it.
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["/laneway"]
