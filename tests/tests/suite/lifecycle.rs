//! Starting and stopping a server process.
use tests::TestApp;

/// A stopped server ends its database sessions instead of leaving them for the database to
/// find reset (PostgreSQL logs every such socket); the in-process job workers stop first,
/// so nothing is left using the pool.
#[tokio::test]
async fn a_stopped_server_has_closed_its_database_connections() {
    let app = TestApp::spawn_with_workers().await;
    let db = app.server.state.db.clone();
    db.connection()
        .ping()
        .await
        .expect("the pool serves while the server runs");
    app.stop().await;
    assert!(
        db.connection().ping().await.is_err(),
        "the pool still hands out connections after the server stopped"
    );
}
