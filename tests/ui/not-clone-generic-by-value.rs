#[derive(Debug, resil::Transient)]
enum Error {
    #[transient(transparent)]
    Rejected(resil::Rejected),
}

impl From<resil::Rejected> for Error {
    fn from(rejected: resil::Rejected) -> Self {
        Error::Rejected(rejected)
    }
}

use resil::resilient;

// rustc suggests `B: AsRef<[u8]> + Clone` and `impl AsRef<[u8]> + Clone`, never a trait of
// resil's private module.
#[resilient(retry = 2)]
async fn send<B: AsRef<[u8]>>(body: B) -> Result<usize, Error> {
    Ok(body.as_ref().len())
}

#[resilient(retry = 2)]
async fn send_impl(body: impl AsRef<[u8]>) -> Result<usize, Error> {
    Ok(body.as_ref().len())
}

struct Client<B>(std::marker::PhantomData<B>);

// A parameter of the `impl`, which the attribute cannot see: named as type parameters are.
impl<B: AsRef<[u8]>> Client<B> {
    #[resilient(retry = 2)]
    async fn send(&self, body: B) -> Result<usize, Error> {
        Ok(body.as_ref().len())
    }
}

fn main() {}
