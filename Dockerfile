# Checkpoint Fleet, the image that docker-compose.yml runs as web, worker, beat and migrate.
# No secret goes into the image: the run-time secret key and database password come in as files
# (see docker-compose.yml); collectstatic gets throwaway keys for its one RUN only.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    CKPTFLEET_VAR_DIR=/var/lib/ckptfleet \
    MEDIA_ROOT=/var/lib/ckptfleet/media \
    STATIC_ROOT=/app/staticfiles

WORKDIR /app

# The dependencies first, from the runtime lock alone, so a code change does not reinstall them: every
# package pinned with its hashes (`make lock` writes it from pyproject.toml), the versions the tests ran.
COPY requirements/lock.txt requirements/lock.txt
RUN pip install --require-hashes -r requirements/lock.txt

COPY . .
# Editable, so BASE_DIR stays /app and templates/ and static/ are found beside the packages; --no-deps,
# since the lock has installed them all (pip check: the versions pyproject.toml pins).
RUN pip install --no-deps -e . \
    && pip check \
    && DJANGO_SECRET_KEY=collectstatic-build-only CKPTFLEET_AUDIT_KEY=collectstatic-build-only-never-keys-events \
        CKPTFLEET_VAR_DIR=/tmp/build-var \
        python manage.py collectstatic --no-input \
    && rm -rf /tmp/build-var

RUN groupadd --system --gid 10001 ckptfleet \
    && useradd --system --uid 10001 --gid ckptfleet --home-dir /var/lib/ckptfleet --shell /usr/sbin/nologin ckptfleet \
    && mkdir -p /var/lib/ckptfleet/media \
    && chown -R ckptfleet:ckptfleet /var/lib/ckptfleet
USER ckptfleet

EXPOSE 8000
ENTRYPOINT ["/app/scripts/docker-entrypoint"]
CMD ["gunicorn", "ckptfleet.wsgi:application", "--bind=0.0.0.0:8000", "--access-logfile=-"]
