import io, time, statistics
import pytest
from django.core.management import call_command
from fleet.models import Host, StorageLocation
from tests.conftest import restore_default_prices, give_roles

@pytest.mark.django_db(transaction=True)
def test_perf(settings, tmp_path, s3, client, django_user_model):
    settings.VAR_DIR = tmp_path
    settings.S3_SECRETS_DIR = tmp_path / "s3-secrets"
    restore_default_prices()
    call_command("seed_demo", dir=str(tmp_path / "demo"), s3_endpoint=s3.url, stdout=io.StringIO())
    u = django_user_model.objects.create_user(username="p", password="x-long-password-1")
    give_roles(u, "admin")
    client.force_login(u)
    urls = [f"/fleet/hosts/{h.pk}/" for h in Host.objects.all()] + [f"/fleet/locations/{l.pk}/" for l in StorageLocation.objects.all()]
    urls += [f"/runs/?host={h.pk}" for h in Host.objects.all()] + ["/runs/?storage_class=GLACIER", "/fleet/"]
    for url in urls:
        times = []
        for _ in range(15):
            t = time.perf_counter(); r = client.get(url); times.append(time.perf_counter() - t)
            assert r.status_code == 200
        times.sort()
        print(f"{url:40s} p50 {1000*times[7]:.0f} ms  p95 {1000*times[14]:.0f} ms")
