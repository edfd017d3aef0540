# shardgate container image: a static binary on an empty base.
#
# Nothing is pulled from a registry: build the binary first, then the image.
#
#   scripts/build-static.sh             # stages target/image/{shardgate,ca-certificates.crt}
#   docker build -t shardgate:local .
#
# The process runs as user 65532 (no shell, no package manager, nothing but
# the binary, CA certificates, the account files and the example table).

# The binary must be the static one scripts/build-static.sh stages: on an
# empty base a dynamically linked one (a plain `cargo build --release`)
# cannot start. It is run once here, under a name that says what to do, so
# such a binary fails the build ("exec /shardgate-is-not-static--...: no
# such file or directory") instead of the container.
FROM scratch AS check
COPY target/image/shardgate /shardgate-is-not-static--build-it-with-scripts-build-static.sh
RUN ["/shardgate-is-not-static--build-it-with-scripts-build-static.sh", "--version"]

FROM scratch

COPY docker/passwd docker/group docker/nsswitch.conf /etc/
COPY target/image/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY config/example.yaml /etc/shardgate/shardgate.yaml
COPY --from=check /shardgate-is-not-static--build-it-with-scripts-build-static.sh /shardgate

USER 65532:65532
# Plain log lines: container logs are rarely a terminal.
ENV NO_COLOR=1
# Proxy listener of the example table (its admin listener is loopback-only).
EXPOSE 8080
ENTRYPOINT ["/shardgate"]
CMD ["serve", "-c", "/etc/shardgate/shardgate.yaml"]
