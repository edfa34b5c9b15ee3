//! A console client for end-to-end tests: signs in through the login form,
//! keeps the session cookie, and sends the CSRF token the pages carry — what
//! a browser does, without one (the browser test drives a real Chromium).

pub const PASSWORD: &str = "correct horse battery staple";

pub struct Web {
    pub base: String,
    /// `tg_session=…` (empty when signed out).
    pub cookie: String,
    pub csrf: String,
    pub set_cookie: String,
    client: reqwest::Client,
}

pub struct Page {
    pub status: u16,
    pub body: String,
    pub location: Option<String>,
}

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

/// The value of `name="_csrf" value="…"` on a page.
pub fn csrf_of(html: &str) -> Option<String> {
    let at = html.find("name=\"_csrf\" value=\"")?;
    let rest = &html[at + 20..];
    Some(rest[..rest.find('"')?].to_string())
}

impl Web {
    /// Not signed in.
    pub fn anonymous(base: &str) -> Web {
        Web {
            base: base.to_string(),
            cookie: String::new(),
            csrf: String::new(),
            set_cookie: String::new(),
            client: client(),
        }
    }

    /// The login form as a browser gets it: its CSRF field and the cookie
    /// that goes with it (`tg_login=…`).
    pub async fn login_form(&self) -> (String, String) {
        let r = self
            .client
            .get(format!("{}/console/login", self.base))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "the login form");
        let cookie = r
            .headers()
            .get_all("set-cookie")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .find(|v| v.starts_with("tg_login="))
            .map(|v| v.split(';').next().unwrap().to_string())
            .expect("the login form sets its CSRF cookie");
        let body = r.text().await.unwrap();
        (
            csrf_of(&body).expect("the login form carries a CSRF token"),
            cookie,
        )
    }

    /// Not signed in, holding the login form's CSRF cookie and token (what
    /// a browser that opened the login page posts with).
    pub async fn at_login_form(base: &str) -> Web {
        let mut w = Web::anonymous(base);
        (w.csrf, w.cookie) = w.login_form().await;
        w
    }

    /// Signs in through `POST /console/login` (the form fetched first, as a
    /// browser does); panics unless it works.
    pub async fn login(base: &str, email: &str) -> Web {
        let mut w = Web::anonymous(base);
        let (csrf, login_cookie) = w.login_form().await;
        let r = w
            .client
            .post(format!("{base}/console/login"))
            .header("cookie", login_cookie)
            .form(&[("email", email), ("password", PASSWORD), ("_csrf", &csrf)])
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 303, "console login of {email}");
        let set = r
            .headers()
            .get("set-cookie")
            .expect("a session cookie")
            .to_str()
            .unwrap()
            .to_string();
        w.cookie = set.split(';').next().unwrap().to_string();
        w.set_cookie = set;
        let home = w.get("/console").await;
        assert_eq!(home.status, 200, "{}", home.body);
        w.csrf = csrf_of(&home.body).expect("pages carry the CSRF token");
        w
    }

    fn req(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        let mut rb = self.client.request(method, format!("{}{path}", self.base));
        if !self.cookie.is_empty() {
            rb = rb.header("cookie", &self.cookie);
        }
        rb
    }

    async fn page(rb: reqwest::RequestBuilder) -> Page {
        let r = rb.send().await.unwrap();
        let status = r.status().as_u16();
        let location = r
            .headers()
            .get("location")
            .map(|v| v.to_str().unwrap().to_string());
        Page {
            status,
            body: r.text().await.unwrap(),
            location,
        }
    }

    pub async fn get(&self, path: &str) -> Page {
        Self::page(self.req(reqwest::Method::GET, path)).await
    }

    /// A plain form post carrying the session's CSRF token as `_csrf`.
    pub async fn post(&self, path: &str, fields: &[(&str, &str)]) -> Page {
        let mut f: Vec<(&str, &str)> = fields.to_vec();
        f.push(("_csrf", &self.csrf));
        Self::page(self.req(reqwest::Method::POST, path).form(&f)).await
    }

    /// An htmx post: the token in the `x-csrf-token` header.
    pub async fn hx_post(&self, path: &str, fields: &[(&str, &str)]) -> Page {
        let rb = self
            .req(reqwest::Method::POST, path)
            .header("hx-request", "true")
            .header("x-csrf-token", &self.csrf)
            .form(fields);
        Self::page(rb).await
    }

    /// A form post with exactly these fields (no token added).
    pub async fn post_raw(&self, path: &str, fields: &[(&str, &str)]) -> Page {
        Self::page(self.req(reqwest::Method::POST, path).form(fields)).await
    }

    /// An htmx post with the given header token.
    pub async fn hx_post_token(&self, path: &str, token: &str, fields: &[(&str, &str)]) -> Page {
        let rb = self
            .req(reqwest::Method::POST, path)
            .header("hx-request", "true")
            .header("x-csrf-token", token)
            .form(fields);
        Self::page(rb).await
    }
}
