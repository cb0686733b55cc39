"""Secrets the test suite plants (keyring entries, key passphrases, account passwords).

Every test that stores or uses a secret takes it from here, so that
``tests/zz_last/test_no_secret_leaks.py`` can prove none of them reached the
profiles file, the app's logs or the run store.
"""
import secrets

_SESSION = secrets.token_hex(6)

#: The passphrase of the encrypted test key.
KEY_PASSPHRASE = f"pass-phrase-{_SESSION}-ünï"
#: The password of the throwaway account the SSH tests log in to.
ACCOUNT_PASSWORD = f"Acct-pw-{_SESSION}"
#: Values stored in (and moved around) the keyring by the hosts/secrets tests.
KEYRING_PASSWORD = f"kr-pw-{_SESSION}-ß"
KEYRING_PASSPHRASE = f"kr-pp-{_SESSION}"

PLANTED = (KEY_PASSPHRASE, ACCOUNT_PASSWORD, KEYRING_PASSWORD, KEYRING_PASSPHRASE)
