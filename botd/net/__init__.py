"""Reading over HTTP what someone else named: a URL fetched from public addresses only, a
response body never read past its cap; and a section's ``proxy:`` as the HTTP libraries under
the SDKs take it (``proxy``)."""
