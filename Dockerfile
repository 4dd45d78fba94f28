# Sluice: the gateway (ingest) and the query CLI in one small image.
#   docker build -t sluice .
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/ingest ./cmd/ingest \
 && CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/query ./cmd/query \
 && mkdir -p /out/data

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/ingest /out/query /usr/local/bin/
COPY configs/ingest.yaml /etc/sluice/ingest.yaml
# The data directory belongs to the image's user (nonroot, 65532): a new
# named volume mounted there takes this owner, so the gateway can write its
# outbox, cursor key and embedded stores. (WORKDIR alone would make it
# root's.)
COPY --from=build --chown=65532:65532 /out/data /var/lib/sluice
WORKDIR /var/lib/sluice
ENV SLUICE_CONFIG=/etc/sluice/ingest.yaml \
    SLUICE_DATA_DIR=/var/lib/sluice \
    SLUICE_HTTP_ADDR=0.0.0.0:8080
EXPOSE 8080
# No shell or curl in this image: `ingest healthcheck` asks the gateway's
# /readyz itself.
HEALTHCHECK --interval=10s --timeout=6s --start-period=30s --retries=3 \
    CMD ["/usr/local/bin/ingest", "healthcheck"]
ENTRYPOINT ["/usr/local/bin/ingest"]
CMD ["serve"]
