# CPU image: slim Python, CPU torch, the MiniLM model package baked in, non-root user.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 \
    HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 \
    CQA_DATA_DIR=/data CQA_HOST=0.0.0.0 CQA_PORT=8000

RUN apt-get update && apt-get install -y --no-install-recommends curl && rm -rf /var/lib/apt/lists/*
WORKDIR /srv/cqa
COPY pyproject.toml README.md ./
COPY app ./app
COPY indexing ./indexing
COPY ranking ./ranking
COPY data ./data
COPY models ./models
# Pass the PyTorch CPU wheel index as TORCH_INDEX to avoid the CUDA build (see README).
ARG TORCH_INDEX=""
# EXTRAS=ray adds Ray for `cqa reindex --engine ray`
ARG EXTRAS=""
RUN pip install ${TORCH_INDEX:+--index-url "$TORCH_INDEX"} torch==2.13.0 \
 && pip install ".${EXTRAS:+[$EXTRAS]}"
RUN useradd --create-home --uid 10001 cqa && mkdir -p /data && chown cqa /data
USER cqa
VOLUME /data
EXPOSE 8000
HEALTHCHECK --interval=30s --timeout=5s --start-period=300s --retries=3 \
  CMD curl -fsS http://127.0.0.1:8000/ready || exit 1
CMD ["cqa", "serve"]
