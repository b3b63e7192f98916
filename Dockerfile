# syntax=docker/dockerfile:1
# karpctl as a container image: one static binary (musl) on distroless/static, which carries the
# CA certificates rustls reads (/etc/ssl/certs/ca-certificates.crt) and a non-root user.
#
#   docker build -t karpctl .                                            # this machine's platform
#   docker buildx build --platform linux/amd64,linux/arm64 -t karpctl .  # both (as release.yml)
#   docker run --rm -e AWS_ACCESS_KEY_ID -e AWS_SECRET_ACCESS_KEY -e AWS_SESSION_TOKEN -e AWS_REGION \
#       -v "$PWD:/work" karpctl diff --all
#
# The build stage runs on the builder's own platform and cross-compiles with tonistiigi/xx
# (clang + lld, the target's musl from Alpine), so an arm64 image builds on an amd64 runner
# without emulation. TLS is rustls on aws-lc (Cargo.toml): no OpenSSL; aws-lc-sys needs only a
# C compiler for the x86_64/aarch64 musl targets.

FROM --platform=$BUILDPLATFORM tonistiigi/xx:1.6.1 AS xx

FROM --platform=$BUILDPLATFORM rust:1-alpine AS build
COPY --from=xx / /
RUN apk add --no-cache clang lld musl-dev
WORKDIR /src
# The crates, fetched once from Cargo.lock alone (placeholder targets, so that the manifest
# reads), before TARGETPLATFORM: one layer for every platform, rebuilt only when the lock changes.
COPY Cargo.toml Cargo.lock ./
RUN mkdir -p src tests && echo 'fn main() {}' >src/main.rs && touch tests/main.rs && \
    cargo fetch --locked && rm -rf src tests
COPY src ./src
COPY tests ./tests
ARG TARGETPLATFORM
# The target's C library, headers and libgcc (xx's meta package), for aws-lc-sys (C) and the link.
RUN xx-apk add --no-cache xx-c-essentials
RUN xx-cargo build --release --locked --target-dir /build && \
    xx-verify --static "/build/$(xx-cargo --print-target-triple)/release/karpctl" && \
    mkdir -p /out && cp "/build/$(xx-cargo --print-target-triple)/release/karpctl" /out/karpctl

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/karpctl /karpctl
ENV SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt
# plans/ are read relative to the working directory: mount the repository here.
WORKDIR /work
ENTRYPOINT ["/karpctl"]
CMD ["--help"]
