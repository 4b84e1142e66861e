# syntax=docker/dockerfile:1
# The bertps image: every daemon and client in one Debian 12 image.
#
#   docker build -t bertps:dev .
#   docker run --rm bertps:dev --helpfull                      # bertps_worker
#   docker run --rm --entrypoint bertps_coordinator bertps:dev --helpfull
#
# Binaries in /usr/local/bin: bertps_coordinator, bertps_server,
# bertps_worker, bertpsctl, bertps_probe. Runs as user bertps (uid/gid
# 10001, as deploy/k8s runs it); working directory /var/lib/bertps. Built
# with -march=x86-64-v3 (.bazelrc): needs an AVX2 CPU.

# ---------------------------------------------------------------- build
# tools/setup.sh --build-only installs Bazel 4.2.3, GCC and the -dev
# packages; the build itself downloads nothing (.bazelrc disables Bazel's
# downloads; the WORKSPACE points its repositories at stubs and /usr).
FROM debian:bookworm AS build
ENV DEBIAN_FRONTEND=noninteractive
WORKDIR /src
COPY tools/setup.sh tools/setup.sh
RUN tools/setup.sh --build-only && rm -rf /var/lib/apt/lists/*
COPY . .
# The Bazel output base and disk cache live in a cache mount (fast rebuilds);
# the binaries are copied out before the mount goes away. `local` spawns:
# Bazel's sandbox needs namespaces a build container may not have.
RUN --mount=type=cache,target=/root/.cache \
    bazel build --spawn_strategy=local \
        //server/coordinator:bertps_coordinator \
        //server/ps:bertps_server \
        //worker:bertps_worker \
        //tools:bertpsctl \
        //deploy/probe:bertps_probe \
 && mkdir -p /out/bin \
 && for b in server/coordinator/bertps_coordinator server/ps/bertps_server \
             worker/bertps_worker tools/bertpsctl deploy/probe/bertps_probe; do \
      strip --strip-unneeded -o "/out/bin/${b##*/}" "bazel-bin/$b" || exit 1; \
    done \
 && bazel shutdown

# -------------------------------------------------------------- runtime
FROM debian:bookworm-slim
# The shared libraries the binaries link, by Debian package, plus hostname
# (the PS pods take their DNS name from `hostname -f`).
# tests/dockerfile_test.sh checks this list against `ldd` of the binaries.
ARG RUNTIME_PACKAGES="\
    hostname \
    libabsl20220623 \
    libc-ares2 \
    libc6 \
    libcivetweb1 \
    libdnnl2 \
    libgcc-s1 \
    libgflags2.2 \
    libgomp1 \
    libgoogle-glog0v6 \
    libgrpc++1.51 \
    libgrpc29 \
    libicu72 \
    liblzma5 \
    libprometheus-cpp-core1.0 \
    libprometheus-cpp-pull1.0 \
    libprotobuf32 \
    libre2-9 \
    libsqlite3-0 \
    libssl3 \
    libstdc++6 \
    libunwind8 \
    libutf8proc2 \
    libyaml-cpp0.7 \
    ocl-icd-libopencl1 \
    zlib1g"
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        ${RUNTIME_PACKAGES} \
 && rm -rf /var/lib/apt/lists/*
RUN groupadd --system --gid 10001 bertps \
 && useradd --system --uid 10001 --gid bertps --home-dir /var/lib/bertps \
        --no-create-home --shell /usr/sbin/nologin bertps \
 && install -d -o bertps -g bertps -m 0750 /var/lib/bertps
COPY --from=build /out/bin/ /usr/local/bin/
USER 10001:10001
WORKDIR /var/lib/bertps
ENTRYPOINT ["/usr/local/bin/bertps_worker"]
CMD ["--helpfull"]
