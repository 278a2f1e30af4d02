"""Reading over HTTP what someone else named: a URL fetched from public addresses only, a
response body never read past its cap."""
