# syntax=docker/dockerfile:1
# tollgate: one binary. Build with `docker compose build` or
#   docker build -t tollgate .

FROM rust:1-bookworm AS build
WORKDIR /src
COPY . .
# Cache mounts keep the registry and build artefacts between builds; the
# binary is copied out of the cached target directory.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/usr/local/cargo/git \
    --mount=type=cache,target=/src/target \
    cargo build --release -p tollgate-server --bin tollgate \
    && install -m 0755 target/release/tollgate /usr/local/bin/tollgate
# Data directories, in case any file is read at run time rather than embedded
# (a directory git does not track is simply absent).
RUN mkdir -p /out/app \
    && for d in migrations sql templates static; do \
         if [ -d "$d" ]; then cp -r "$d" /out/app/; fi; \
       done

FROM debian:bookworm-slim
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates curl \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --home-dir /app --shell /usr/sbin/nologin tollgate
WORKDIR /app
COPY --from=build /usr/local/bin/tollgate /usr/local/bin/tollgate
COPY --from=build /out/app/ /app/
USER tollgate
EXPOSE 8080
ENTRYPOINT ["tollgate"]
CMD ["serve", "--listen", "0.0.0.0:8080"]
