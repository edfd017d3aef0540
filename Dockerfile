# shardgate container image: a static binary on an empty base.
#
# Nothing is pulled from a registry: build the binary first, then the image.
#
#   scripts/build-static.sh             # stages target/image/{shardgate,ca-certificates.crt}
#   docker build -t shardgate:local .
#
# The process runs as user 65532 (no shell, no package manager, nothing but
# the binary, CA certificates, the account files and the example table).
FROM scratch

COPY docker/passwd docker/group docker/nsswitch.conf /etc/
COPY target/image/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY config/example.yaml /etc/shardgate/shardgate.yaml
COPY target/image/shardgate /shardgate

USER 65532:65532
# Plain log lines: container logs are rarely a terminal.
ENV NO_COLOR=1
# Proxy listener of the example table (its admin listener is loopback-only).
EXPOSE 8080
ENTRYPOINT ["/shardgate"]
CMD ["serve", "-c", "/etc/shardgate/shardgate.yaml"]
