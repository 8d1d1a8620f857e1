import pytest
from django.db import connection

@pytest.fixture(scope="session")
def where(django_db_setup, django_db_blocker):
    with django_db_blocker.unblock():
        with connection.cursor() as c:
            c.execute("select current_database()")
            return c.fetchone()[0], connection.settings_dict["NAME"]

def test_where(where):
    print("WHERE", where)
