# syntax=docker/dockerfile:1
# tollgate: one binary. Build with `docker build -t tollgate .` (the
# production image: `tollgate` only). `docker compose` builds the `demo`
# target instead: the same image plus `tollgate-dev`, which runs the demo
# platform on a built-in mock provider.

FROM rust:1-bookworm AS build
WORKDIR /src
COPY . .
# Cache mounts keep the registry and build artefacts between builds; the
# binary is copied out of the cached target directory.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/usr/local/cargo/git \
    --mount=type=cache,target=/src/target \
    cargo build --release -p tollgate-server --bin tollgate -p tollgate-devtools --bin tollgate-dev \
    && install -m 0755 target/release/tollgate /usr/local/bin/tollgate \
    && install -m 0755 target/release/tollgate-dev /usr/local/bin/tollgate-dev
# Data directories, in case any file is read at run time rather than embedded
# (a directory git does not track is simply absent).
RUN mkdir -p /out/app \
    && for d in migrations sql templates static; do \
         if [ -d "$d" ]; then cp -r "$d" /out/app/; fi; \
       done

FROM debian:bookworm-slim AS runtime
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates curl \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --home-dir /app --shell /usr/sbin/nologin tollgate
WORKDIR /app
COPY --from=build /usr/local/bin/tollgate /usr/local/bin/tollgate
COPY --from=build /out/app/ /app/
EXPOSE 8080

# `docker compose`'s image: the runtime with tollgate-dev for the demo.
FROM runtime AS demo
COPY --from=build /usr/local/bin/tollgate-dev /usr/local/bin/tollgate-dev
USER tollgate
ENTRYPOINT ["tollgate-dev"]
CMD ["demo", "--listen", "0.0.0.0:8080"]

# The production image (the last stage: what `docker build .` gives).
FROM runtime AS production
USER tollgate
ENTRYPOINT ["tollgate"]
CMD ["serve", "--listen", "0.0.0.0:8080"]
