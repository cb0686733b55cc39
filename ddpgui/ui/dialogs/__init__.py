"""The app's dialogs: host profile, host key, secret prompt, new sweep, export."""
