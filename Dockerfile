# The validator service (docs/service.md): `cfgcheck serve` on port 8000, one worker process
# per core the container may use, the repository's conf/ as the server's config directory.
#
#   docker build -t cfgcheck-service .
#   docker run --rm -p 8000:8000 cfgcheck-service
#   docker run --rm -p 8000:8000 -v $PWD/conf:/app/conf:ro cfgcheck-service   # your conf/
#
# tests/test_dockerfile.py checks these lines against the README's set-up and runs the
# HEALTHCHECK command against a real `cfgcheck serve`.
FROM python:3.11-slim

# The CPU wheel index: `pip install torch==...` from PyPI alone resolves the CUDA build.
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app

# torch pinned to the CPU wheel first, as the README's set-up, so no CUDA packages are pulled.
RUN pip install --index-url "$TORCH_INDEX_URL" torch==2.13.0

# What `cfgcheck serve` needs: the service extra (FastAPI, uvicorn) and transformers (model
# folders, tokenizers). A layer of its own: editing conf/ does not reinstall.
COPY pyproject.toml README.md ./
COPY cfgcheck ./cfgcheck
RUN pip install ".[service,transformers]"

COPY conf ./conf
COPY datasets ./datasets

# Never root: the service reads configs, it writes nothing.
RUN useradd --system --uid 10001 --no-create-home --home-dir /app cfgcheck
USER cfgcheck

EXPOSE 8000
# GET /healthz: 200 once a worker has finished start-up (no auth, no work).
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s --retries=3 \
    CMD ["python", "-c", "import urllib.request as u; u.urlopen('http://127.0.0.1:8000/healthz', timeout=4)"]

# SIGTERM (docker stop) drains: requests in flight are answered, then the workers exit.
STOPSIGNAL SIGTERM
ENTRYPOINT ["cfgcheck", "serve", "--host", "0.0.0.0", "--port", "8000"]
CMD ["--config-dir", "conf"]
