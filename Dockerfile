# Sluice: the gateway (ingest) and the query CLI in one small image.
#   docker build -t sluice .
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/ingest ./cmd/ingest \
 && CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/query ./cmd/query

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/ingest /out/query /usr/local/bin/
COPY configs/ingest.yaml /etc/sluice/ingest.yaml
WORKDIR /var/lib/sluice
ENV SLUICE_CONFIG=/etc/sluice/ingest.yaml \
    SLUICE_DATA_DIR=/var/lib/sluice \
    SLUICE_HTTP_ADDR=0.0.0.0:8080
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/ingest"]
CMD ["serve"]
