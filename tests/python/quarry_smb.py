"""smbprotocol connected to the Quarry under test, for the Python interop scripts of
tests/tests/smb_python_clients.rs. The Rust test puts this folder on PYTHONPATH and
PORT, SMBUSER and SMBPASS in the environment."""
import os
import uuid

from smbprotocol.connection import Connection
from smbprotocol.session import Session
from smbprotocol.tree import TreeConnect


def smb_tree(share="data", require_encryption=True, client_guid=None):
    """A new connection, session and tree connect to \\\\127.0.0.1\\<share>, as
    (connection, session, tree). require_encryption is smbprotocol's Session flag (its
    default, True, asks for encryption when the server offers it); client_guid is the
    connection's ClientGuid (a fresh one by default)."""
    conn = Connection(client_guid or uuid.uuid4(), "127.0.0.1", int(os.environ["PORT"]))
    conn.connect()
    sess = Session(conn, os.environ["SMBUSER"], os.environ["SMBPASS"],
                   require_encryption=require_encryption)
    sess.connect()
    tree = TreeConnect(sess, "\\\\127.0.0.1\\" + share)
    tree.connect()
    return conn, sess, tree
