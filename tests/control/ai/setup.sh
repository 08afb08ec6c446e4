#!/bin/sh
# Alt-text prerequisite: Debian's Tesseract OCR (tesseract-ocr, English data included), when missing
# and we can install it. Idempotent; safe to run every time. Without it alt text skips OCR and the
# OCR test skips (under CI=true it fails instead).
set -eu
if ! command -v tesseract >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends tesseract-ocr tesseract-ocr-eng
    else
        echo "setup.sh: tesseract is missing (apt-get install tesseract-ocr); alt text will not read text in images" >&2
    fi
fi
