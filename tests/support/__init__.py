"""What the tests need besides the product package: the fake server (``fake_server``)."""
