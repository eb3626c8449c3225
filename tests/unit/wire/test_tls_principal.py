"""The principal of a TLS client certificate, in Kafka's form (RFC 2253, short names)."""

from rafka.wire.tls import certificate_principal


class _Writer:
    def __init__(self, certificate):
        self.certificate = certificate

    def get_extra_info(self, name):
        assert name == "peercert"
        return self.certificate


def test_the_subject_reads_as_kafkas_rfc2253_distinguished_name():
    subject = ((("countryName", "US"),), (("organizationName", "Acme"),),
               (("organizationalUnitName", "ops"),), (("commonName", "alice"),))
    assert certificate_principal(_Writer({"subject": subject})) == "User:CN=alice,OU=ops,O=Acme,C=US"


def test_special_characters_in_a_value_are_escaped():
    subject = ((("organizationName", "Acme, Inc."),), (("commonName", "a+b=c"),))
    assert certificate_principal(_Writer({"subject": subject})) == (
        r"User:CN=a\+b=c,O=Acme\, Inc.")


def test_no_certificate_is_anonymous():
    assert certificate_principal(_Writer(None)) == "User:ANONYMOUS"
