# Antre: web dashboard and worker image (docker-compose.yml runs both from it).
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONPATH=/app

# PYTHONPATH=/app: the `antre` console script can import the app module (antre_demo) from
# /app, and the web app finds static/ and templates/ beside the source.
WORKDIR /app
COPY . /app
RUN pip install ".[postgres]" \
    && useradd --create-home --uid 1000 antre
USER antre

EXPOSE 8000
CMD ["antre", "web", "antre_demo:app", "--host", "0.0.0.0", "--port", "8000"]
