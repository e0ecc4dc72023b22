# The controller image the Helm chart and config/manager deploy:
#   docker build --build-arg VERSION=$(git describe --tags --always) -t ghcr.io/claimscale/claimscale:TAG .
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
ARG COMMIT=unknown
RUN CGO_ENABLED=0 go build -trimpath \
      -ldflags "-s -w -X github.com/claimscale/claimscale/internal/version.Version=${VERSION} -X github.com/claimscale/claimscale/internal/version.Commit=${COMMIT}" \
      -o /claimscale ./cmd/claimscale

# No shell, no package manager; runs as the non-root user the chart expects.
FROM gcr.io/distroless/static:nonroot
COPY --from=build /claimscale /claimscale
USER 65532:65532
ENTRYPOINT ["/claimscale"]
